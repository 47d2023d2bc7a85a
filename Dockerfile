# syntax=docker/dockerfile:1
# Images of the api and the worker, from one shared build. From the repository root:
#   docker build --target api -t plant-store-api .
#   docker build --target worker -t plant-store-worker .
# The build stage installs exactly the lockfile (npm ci; postinstall applies patches/), builds the
# two apps and their workspace packages, and drops devDependencies. The runtime stage takes only
# what the api and the worker run: their dist/ and manifests, the packages they import, and the
# pruned node_modules (no sources, tests, bench, chaos or build tools).

FROM node:24-bookworm-slim AS base
ENV TURBO_TELEMETRY_DISABLED=1 \
    NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false
WORKDIR /app

# Only the manifests, lockfile and patches, so the install layer below stays cached until they change.
FROM base AS manifests
COPY . /src
RUN cd /src \
 && find . -name package.json -not -path "*/node_modules/*" -not -path "*/dist/*" -exec cp --parents "{}" /app/ \; \
 && cp package-lock.json /app/ \
 && cp -r patches /app/

FROM base AS build
COPY --from=manifests /app/ ./
RUN npm ci --include=dev
COPY . .
RUN npx turbo run build --filter=@plant-store/api... --filter=@plant-store/worker... \
 && npm prune --omit=dev \
 # typescript stays after the prune as a peer of @trpc/server (for its types); nothing runs it.
 # Workspace links to what is not shipped would dangle in the runtime image.
 && rm -rf node_modules/typescript node_modules/@plant-store/bench node_modules/@plant-store/chaos \
           node_modules/@plant-store/client node_modules/@plant-store/launcher node_modules/@plant-store/redis-server \
           node_modules/@plant-store/rest-client node_modules/@plant-store/testing node_modules/@plant-store/api-contract

# Code stays owned by root (read-only for the app); the processes run as the image's "node" user.
FROM base AS runtime
ENV NODE_ENV=production
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/packages/contracts/package.json ./packages/contracts/
COPY --from=build /app/packages/contracts/dist ./packages/contracts/dist
COPY --from=build /app/packages/tokens/package.json ./packages/tokens/
COPY --from=build /app/packages/tokens/dist ./packages/tokens/dist
COPY --from=build /app/packages/logging/package.json ./packages/logging/
COPY --from=build /app/packages/logging/dist ./packages/logging/dist
# The store's Lua scripts are read at run time from packages/store/lua/.
COPY --from=build /app/packages/store/package.json ./packages/store/
COPY --from=build /app/packages/store/dist ./packages/store/dist
COPY --from=build /app/packages/store/lua ./packages/store/lua
COPY --from=build /app/packages/webhooks/package.json ./packages/webhooks/
COPY --from=build /app/packages/webhooks/dist ./packages/webhooks/dist
USER node
STOPSIGNAL SIGTERM

FROM runtime AS worker
COPY --from=build /app/apps/worker/package.json ./apps/worker/
COPY --from=build /app/apps/worker/dist ./apps/worker/dist
# Healthy while the relay keeps touching its heartbeat file, i.e. the process runs and reaches Redis.
ENV WORKER_HEARTBEAT_FILE=/tmp/plant-store-worker.heartbeat
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "apps/worker/dist/healthcheck.js"]
# REDIS_URL or REDIS_CLUSTER_NODES (and WORKER_CONCURRENCY) come from the runtime environment.
CMD ["node", "apps/worker/dist/main.js"]

# Last, so a plain `docker build .` gives the api.
FROM runtime AS api
COPY --from=build /app/apps/api/package.json ./apps/api/
COPY --from=build /app/apps/api/dist ./apps/api/dist
# In a container the api listens on all interfaces; REDIS_URL or REDIS_CLUSTER_NODES, API_TOKENS and
# ADMIN_TOKEN come from the environment.
ENV HOST=0.0.0.0 PORT=3000
EXPOSE 3000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:3000/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# A 16 MiB young generation: fewer garbage collections under load (docs/development.md, Performance).
CMD ["node", "--max-semi-space-size=16", "--max-old-space-size=1024", "apps/api/dist/main.js"]
