# syntax=docker/dockerfile:1
# Images of the api and the worker, from one shared build. From the repository root:
#   docker build --target api -t plant-store-api .
#   docker build --target worker -t plant-store-worker .
# Plain workspace build: install with the root lockfile (postinstall applies patches/), build both
# apps and their workspace dependencies with turbo, drop devDependencies.

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
# npm install honours the lockfile; npm ci refuses it because it lacks other platforms' optional
# biome/turbo binaries (the registry these were locked against does not serve them).
RUN npm install
COPY . .
RUN npx turbo run build --filter=@plant-store/api... --filter=@plant-store/worker... \
 && npm prune --omit=dev

# Code stays owned by root (read-only for the app); the processes run as the image's "node" user.
FROM base AS runtime
ENV NODE_ENV=production
COPY --from=build /app /app
USER node
STOPSIGNAL SIGTERM

FROM runtime AS worker
# REDIS_URL (and WORKER_CONCURRENCY) come from the runtime environment.
CMD ["node", "apps/worker/dist/main.js"]

# Last, so a plain `docker build .` gives the api.
FROM runtime AS api
# In a container the api listens on all interfaces; REDIS_URL, API_TOKENS and ADMIN_TOKEN come from the environment.
ENV HOST=0.0.0.0 PORT=3000
EXPOSE 3000
# A 16 MiB young generation: fewer garbage collections under load (README, Performance).
CMD ["node", "--max-semi-space-size=16", "apps/api/dist/main.js"]
