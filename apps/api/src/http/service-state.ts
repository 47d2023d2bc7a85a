import type { FastifyInstance } from "fastify";
import fp from "fastify-plugin";
import type { StoreCapacity } from "../capacity.js";
import type { OutageMonitor } from "../outage.js";

declare module "fastify" {
  interface FastifyInstance {
    /** Every route registered, as `METHOD url`: the security suite checks each has an entry. */
    routeList: string[];
    /** Logs a Redis outage once when it starts and once when it ends. */
    outage: OutageMonitor;
    /** The store's room: its data volume and Redis's memory. */
    capacity: StoreCapacity;
  }
}

export type ServiceStateOptions = {
  /** Filled as routes are registered (the route matcher reads it for 405s on static routes). */
  routeList: string[];
  outage: OutageMonitor;
  capacity: StoreCapacity;
};

/**
 * What the whole service shares: each request's authentication slot, the list of routes (kept by
 * an onRoute hook, so register this before any route), the outage monitor and the store's
 * capacity watch, closed with the app.
 */
export const serviceState = fp<ServiceStateOptions>(
  async (app: FastifyInstance, { routeList, outage, capacity }) => {
    app.decorateRequest("auth", null);
    app.decorate("routeList", routeList);
    app.decorate("outage", outage);
    app.decorate("capacity", capacity);
    app.addHook("onClose", (_app, done) => {
      app.outage.close();
      app.capacity.close();
      done();
    });
    app.addHook("onRoute", (route) => {
      for (const method of [route.method].flat()) app.routeList.push(`${method} ${route.url}`);
    });
  },
  { name: "plant-store-service-state" },
);
