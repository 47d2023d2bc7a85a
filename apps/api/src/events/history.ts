import {
  comparePositions,
  type EventLog,
  type EventPosition,
  type LogEntry,
  lastIdAtOrBefore,
  MAX_SEQ,
} from "@plant-store/store";

/**
 * What a stream catching up from a cursor reads of the event log: the log's entries after the
 * cursor, in the log's order, a few at a time as its reader takes them (pull, never push). A
 * catch-up holds one small page per partition and what its reader has not taken yet, whatever its
 * cursor: reading a whole page of every partition ahead of the reader held ~100 MB per stream.
 */

/**
 * The history reads of every catch-up of an api process: at most `concurrency` at once, the others
 * waiting in the order they asked. A catch-up waits for one read at a time, so catch-ups take turns:
 * ten streams opened at an old cursor share a few Redis round trips instead of flooding Redis.
 */
export class HistoryReads {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly concurrency: number) {}

  async run<T>(read: () => Promise<T>): Promise<T> {
    if (this.running < this.concurrency) this.running++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await read();
    } finally {
      // The slot passes straight to the next in line (the count stays), or is given back.
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}

/** One stream's read position in the log's history: per partition, the last entry read and those not taken yet. */
export class History {
  /** Per partition, the id of the last entry read from Redis. */
  private readonly readUpTo: string[];
  /** Per partition, entries read and not taken yet, in order. */
  private readonly unread: LogEntry[][];
  /** Partitions that may hold more entries below the bound. */
  private readonly open = new Set<number>();
  private upTo = "0-0";

  constructor(
    private readonly log: EventLog,
    private readonly reads: HistoryReads,
    after: EventPosition,
    /** Entries read from a partition at a time. */
    private readonly pageSize: number,
  ) {
    this.readUpTo = Array.from({ length: log.partitions }, (_, p) => lastIdAtOrBefore(after, p));
    this.unread = Array.from({ length: log.partitions }, () => []);
  }

  /** Reads on up to the entries below `belowMs` (the hub's watermark: every entry below it is in the log). */
  extendTo(belowMs: number): void {
    this.upTo = `${belowMs - 1}-${MAX_SEQ}`;
    for (let p = 0; p < this.unread.length; p++) this.open.add(p);
  }

  /** The next entries in the log's order, at most `max`; none once every entry below the bound was taken. */
  async take(max: number): Promise<LogEntry[]> {
    const taken: LogEntry[] = [];
    await this.refill();
    while (taken.length < max) {
      const next = this.earliestUnread();
      if (next === undefined) break;
      const unread = this.unread[next] as LogEntry[];
      taken.push(unread.shift() as LogEntry);
      if (unread.length === 0 && this.open.has(next)) await this.refill();
    }
    return taken;
  }

  /**
   * Reads a page for each open partition with nothing unread (the log's order needs every open
   * partition's next entry), and for those close to empty in the same round trip.
   */
  private async refill(): Promise<void> {
    if (![...this.open].some((p) => this.unread[p]?.length === 0)) return;
    const low = Math.ceil(this.pageSize / 4);
    const due = [...this.open].filter((p) => (this.unread[p]?.length ?? 0) < low);
    const pages = await this.reads.run(() =>
      Promise.all(due.map((p) => this.log.range(p, this.readUpTo[p] as string, this.upTo, this.pageSize))),
    );
    due.forEach((p, i) => {
      const page = pages[i] as LogEntry[];
      const last = page.at(-1);
      if (last) this.readUpTo[p] = last.id;
      if (page.length < this.pageSize) this.open.delete(p);
      this.unread[p]?.push(...page);
    });
  }

  /** The partition whose next unread entry comes first in the log's order. */
  private earliestUnread(): number | undefined {
    let earliest: number | undefined;
    for (let p = 0; p < this.unread.length; p++) {
      const head = this.unread[p]?.[0];
      if (head === undefined) continue;
      if (earliest === undefined || comparePositions(head, this.unread[earliest]?.[0] as LogEntry) < 0) earliest = p;
    }
    return earliest;
  }
}
