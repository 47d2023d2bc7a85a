// Whether a private cluster is healthy: what every running node says of itself and of the others.
import { isRunning } from "../child.js";
import { type RespReply, respCall } from "../resp.js";
import type { NodeState } from "./node.js";
import { CLUSTER_SLOTS } from "./slots.js";
import { isReplica, parseClusterNodes, parseInfo } from "./topology.js";

/**
 * Why the cluster of `states` is not healthy yet, or `undefined` when it is: every running node
 * reports cluster_state:ok and all slots, knows every node, links to its master when it is a
 * replica, lists every running replica in CLUSTER SLOTS, and agrees with the others on who serves
 * which slot. `notServing`: a port that must serve no slot (a master being failed over).
 */
export async function healthProblem(
  states: readonly NodeState[],
  password: string | undefined,
  notServing?: number,
): Promise<string | undefined> {
  const byPort = new Map(states.map((state) => [state.port, state]));
  const signatures = new Map<string, number>();
  for (const state of states) {
    if (!isRunning(state.child)) continue;
    const at = `127.0.0.1:${state.port}`;
    let replies: RespReply[];
    try {
      replies = await respCall(
        state.port,
        [
          ["CLUSTER", "INFO"],
          ["INFO", "replication"],
          ["CLUSTER", "NODES"],
          ["CLUSTER", "SLOTS"],
        ],
        {
          password,
        },
      );
    } catch (error) {
      return `${at}: ${(error as Error).message}`;
    }
    const [clusterInfo, replication, clusterNodes] = replies.slice(0, 3).map(String);
    const clusterSlots = replies[3];
    const info = parseInfo(clusterInfo ?? "");
    if (info.get("cluster_state") !== "ok") return `${at} reports cluster_state:${info.get("cluster_state")}`;
    for (const field of ["cluster_slots_assigned", "cluster_slots_ok"]) {
      if (info.get(field) !== String(CLUSTER_SLOTS)) return `${at} reports ${field}:${info.get(field)}`;
    }
    if (info.get("cluster_known_nodes") !== String(states.length)) {
      return `${at} knows ${info.get("cluster_known_nodes")} of ${states.length} nodes`;
    }
    const repl = parseInfo(replication ?? "");
    if (repl.get("role") === "slave" && repl.get("master_link_status") !== "up") {
      return `${at} is a replica whose master_link_status is ${repl.get("master_link_status")}`;
    }
    const view = parseClusterNodes(clusterNodes ?? "");
    const portOf = new Map(view.map((entry) => [entry.id, entry.port]));
    const signature: string[] = [];
    for (const entry of view) {
      const node = byPort.get(entry.port);
      if (!node) return `${at} knows 127.0.0.1:${entry.port}, not a node of this cluster`;
      if (!isRunning(node.child)) {
        if (entry.slots.length > 0) return `${at} still routes slots to ${entry.port}, which is down`;
        continue;
      }
      const bad = entry.flags.filter((flag) => ["fail", "fail?", "handshake", "noaddr"].includes(flag));
      if (bad.length > 0) return `${at} flags ${entry.port} ${bad.join(",")}`;
      if (entry.port === notServing && entry.slots.length > 0) return `${at} still routes slots to ${entry.port}`;
      if (isReplica(entry)) signature.push(`${entry.port} replicates ${portOf.get(entry.masterId ?? "")}`);
      for (const [start, end] of entry.slots) signature.push(`${start}-${end} on ${entry.port}`);
    }
    // CLUSTER SLOTS, what clients route by, must list every running replica too.
    const replicasOf = new Map<number | undefined, number>();
    for (const entry of view) {
      if (!isReplica(entry) || !isRunning(byPort.get(entry.port)?.child ?? state.child)) continue;
      const master = portOf.get(entry.masterId ?? "");
      replicasOf.set(master, (replicasOf.get(master) ?? 0) + 1);
    }
    if (!Array.isArray(clusterSlots)) return `${at} answered CLUSTER SLOTS with ${String(clusterSlots)}`;
    for (const range of clusterSlots) {
      const [start, , master, ...replicas] = Array.isArray(range) ? range : [];
      const masterPort = Array.isArray(master) ? Number(master[1]) : undefined;
      const expected = replicasOf.get(masterPort) ?? 0;
      if (replicas.length < expected) {
        return `${at} lists ${replicas.length} of ${expected} replicas of ${masterPort} in CLUSTER SLOTS (from slot ${start})`;
      }
    }
    const key = signature.sort().join("; ");
    signatures.set(key, state.port);
  }
  if (signatures.size > 1) return `nodes disagree on the topology: ${[...signatures.keys()].join(" | ")}`;
  return undefined;
}
