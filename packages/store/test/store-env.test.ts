// The store's environment variables have one owner: `storeEnv` writes what `parseStoreConfig` reads,
// and `storeEnvOf` picks them out of an environment. No Redis needed.
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  parseStoreConfig,
  STORE_ENV_NAMES,
  StoreConfigError,
  storeEnv,
  storeEnvOf,
  unsetIfBlank,
  unsetIfEmpty,
} from "../src/index.js";

describe("storeEnv", () => {
  it("gives one Redis as REDIS_URL, and the settings only when given", () => {
    expect(storeEnv({ url: "redis://127.0.0.1:6390" })).toEqual({ REDIS_URL: "redis://127.0.0.1:6390" });
    const env = storeEnv({
      url: "redis://127.0.0.1:6390",
      partitions: 16,
      minReplicasAck: 0,
      replicaAckTimeoutMs: 500,
    });
    expect(parseStoreConfig(env)).toEqual({
      redis: { mode: "single", url: "redis://127.0.0.1:6390" },
      partitions: 16,
      minReplicasAck: 0,
      replicaAckTimeoutMs: 500,
    });
  });

  it("gives a cluster as REDIS_CLUSTER_NODES (a list or a string) with its password", () => {
    const env = storeEnv({ clusterNodes: ["127.0.0.1:7000", "127.0.0.1:7001"], password: "p@ss", minReplicasAck: 1 });
    expect(env).toEqual({
      REDIS_CLUSTER_NODES: "127.0.0.1:7000,127.0.0.1:7001",
      REDIS_PASSWORD: "p@ss",
      REDIS_MIN_REPLICAS_ACK: "1",
    });
    expect(parseStoreConfig(env).redis).toEqual({
      mode: "cluster",
      nodes: [
        { host: "127.0.0.1", port: 7000 },
        { host: "127.0.0.1", port: 7001 },
      ],
      username: undefined,
      password: "p@ss",
      tls: false,
    });
    expect(storeEnv({ clusterNodes: "127.0.0.1:7000" })).toEqual({ REDIS_CLUSTER_NODES: "127.0.0.1:7000" });
  });

  it("refuses neither or both of a URL and cluster nodes", () => {
    expect(() => storeEnv({})).toThrow(StoreConfigError);
    expect(() => storeEnv({ url: "redis://127.0.0.1:1", clusterNodes: "127.0.0.1:2" })).toThrow(StoreConfigError);
  });
});

describe("storeEnvOf", () => {
  it("picks the store's variables that are set, and nothing else", () => {
    const env = { PATH: "/bin", REDIS_CLUSTER_NODES: "127.0.0.1:7000", REDIS_PASSWORD: "", STORE_PARTITIONS: "8" };
    expect(storeEnvOf(env)).toEqual({ REDIS_CLUSTER_NODES: "127.0.0.1:7000", STORE_PARTITIONS: "8" });
    expect(STORE_ENV_NAMES).toContain("REDIS_MIN_REPLICAS_ACK");
  });
});

describe("a variable set to nothing", () => {
  const port = (preprocess: (value: unknown) => unknown) =>
    z.preprocess(preprocess, z.coerce.number().int().min(1).default(6379));

  it("unsetIfBlank: empty or spaces only takes the default", () => {
    for (const blank of ["", "  ", "\t"]) expect(port(unsetIfBlank).parse(blank)).toBe(6379);
    expect(port(unsetIfBlank).parse(" 7000 ")).toBe(7000);
    expect(parseStoreConfig({ STORE_PARTITIONS: "  ", REDIS_URL: "" }).partitions).toBeUndefined();
  });

  it("unsetIfEmpty: only empty takes the default; spaces are a value, and refused here", () => {
    expect(port(unsetIfEmpty).parse("")).toBe(6379);
    expect(port(unsetIfEmpty).safeParse("  ").success).toBe(false);
  });
});
