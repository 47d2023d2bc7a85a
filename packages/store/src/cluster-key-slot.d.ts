// cluster-key-slot (ioredis's own slot function) ships no types.
declare module "cluster-key-slot" {
  /** The Redis Cluster slot of a key: CRC16 of the key, or of its `{hash tag}`, modulo 16384. */
  export default function calculateSlot(key: string | Buffer): number;
}
