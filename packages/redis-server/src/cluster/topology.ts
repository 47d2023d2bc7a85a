// Reading a cluster's state: its CLUSTER NODES and INFO replies.

export interface ViewEntry {
  id: string;
  port: number;
  flags: string[];
  masterId: string | undefined;
  slots: [number, number][];
}

/** Parses CLUSTER NODES: `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>…` */
export function parseClusterNodes(text: string): ViewEntry[] {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => {
      const [id = "", address = "", flags = "", master = "-", , , , , ...slotFields] = line.trim().split(" ");
      const hostPort = address.split("@")[0] ?? "";
      const slots: [number, number][] = [];
      for (const field of slotFields) {
        if (field.startsWith("[")) continue; // a slot being migrated or imported
        const [start, end = start] = field.split("-");
        slots.push([Number(start), Number(end)]);
      }
      return {
        id,
        port: Number(hostPort.slice(hostPort.lastIndexOf(":") + 1)),
        flags: flags.split(",").filter((flag) => flag !== "myself" && flag !== "noflags"),
        masterId: master === "-" ? undefined : master,
        slots,
      };
    });
}

export const parseInfo = (text: string) =>
  new Map(
    text
      .split("\r\n")
      .filter((line) => line.includes(":") && !line.startsWith("#"))
      .map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1)] as const),
  );

export const isReplica = (entry: ViewEntry) => entry.flags.includes("slave") || entry.flags.includes("replica");
