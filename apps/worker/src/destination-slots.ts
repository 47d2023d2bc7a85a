/** The shortest wait of an attempt turned away from a busy destination: one that answers frees a slot soon. */
const MIN_WAIT_MS = 100;
/** A destination that answered within this long is answering: it may use more slots. */
const ANSWERING_MS = 1000;
/** Destinations timing out that are remembered at most (the longest-silent forgotten first): a subscription's URL each. */
const TIMING_OUT_REMEMBERED = 10_000;

interface Destination {
  /** Start times (ms) of the attempts in flight. */
  started: number[];
  /** When one of its attempts last got an answer (any status). */
  answeredAt: number | undefined;
}

/**
 * Each destination's share of this worker's delivery slots, so that one receiver's slowness cannot
 * take the slots the others need. A destination has at most `quiet` attempts in flight (a receiver
 * that never answers holds those, each until the timeout), or `answering` while it answers (an
 * answer within the last second: a busy, healthy receiver is not held back); `answering` leaves
 * the other destinations some slots even when such a receiver suddenly stops answering. With
 * `total`, at most that many attempts are in flight in all (a batch delivery makes several at once).
 *
 * Destinations timing out — whose latest attempt got no answer (a timeout, a refused connection),
 * until one of theirs is answered again — share at most `timingOut` slots between them: with a
 * share each alone, five that never answer would hold every slot (issue 51: six receivers that
 * trickled their answers held all 200, and a healthy one waited for their timeouts).
 *
 * An attempt turned away is told how long to wait: as long as the destination has gone without
 * answering (since its latest answer, or since its oldest attempt in flight began, or since it
 * began timing out), at least MIN_WAIT_MS and at most `maxWaitMs`, plus up to a quarter of
 * jitter. A receiver that answers gets its turned-away attempts back within about MIN_WAIT_MS; a
 * hanging one's come back less and less often, up to once per timeout, instead of crowding the
 * queue. One turned away because all `total` are in flight waits about MIN_WAIT_MS.
 */
export function destinationSlots(
  limits: { quiet: number; answering: number; total?: number; timingOut?: number },
  maxWaitMs: number,
  random = Math.random,
) {
  /** Only destinations with attempts in flight. */
  const destinations = new Map<string, Destination>();
  let total = 0;
  /** Destinations timing out: since when each has, oldest first. */
  const timingOut = new Map<string, number>();
  /** Attempts in flight that began while their destination was timing out. */
  let timingOutInFlight = 0;
  const waitFor = (silentMs: number) =>
    Math.round(Math.min(Math.max(silentMs, MIN_WAIT_MS) * (1 + 0.25 * random()), maxWaitMs));
  /** Batches waiting for a slot (`freed`), oldest first. */
  const waiters: { destination: string; wake: () => void }[] = [];

  /** Wakes the oldest waiter for `destination` (or, if none, the oldest of all: it may wait on `total`). */
  function wakeOne(destination: string) {
    const index = waiters.findIndex((waiter) => waiter.destination === destination);
    const [waiter] = waiters.splice(index === -1 ? 0 : index, 1);
    waiter?.wake();
  }

  /** An answer ends a destination's timing out; an attempt without one starts it, if it had not. */
  function noteTimingOut(destination: string, answered: boolean, at: number) {
    if (answered) timingOut.delete(destination);
    else if (!timingOut.has(destination)) {
      timingOut.set(destination, at);
      if (timingOut.size > TIMING_OUT_REMEMBERED) timingOut.delete(timingOut.keys().next().value as string);
    }
  }

  return {
    /**
     * A slot for an attempt to `destination` — release it when the attempt ends, saying whether the
     * receiver answered — or how long to wait before trying again.
     */
    take(
      destination: string,
      now = Date.now(),
    ): { release: (answered: boolean, at?: number) => void } | { waitMs: number } {
      const entry = destinations.get(destination) ?? { started: [], answeredAt: undefined };
      const answering = entry.answeredAt !== undefined && now - entry.answeredAt < ANSWERING_MS;
      if (limits.total !== undefined && total >= limits.total)
        return { waitMs: Math.round(MIN_WAIT_MS * (1 + 0.25 * random())) };
      if (entry.started.length >= (answering ? limits.answering : limits.quiet))
        return { waitMs: waitFor(now - Math.max(entry.answeredAt ?? 0, Math.min(...entry.started))) };
      const silentSince = timingOut.get(destination);
      if (silentSince !== undefined && timingOutInFlight >= (limits.timingOut ?? Number.POSITIVE_INFINITY))
        return { waitMs: waitFor(now - silentSince) };
      entry.started.push(now);
      destinations.set(destination, entry);
      total++;
      if (silentSince !== undefined) timingOutInFlight++;
      let released = false;
      return {
        release(answered: boolean, at = Date.now()) {
          if (released) return;
          released = true;
          total--;
          if (silentSince !== undefined) timingOutInFlight--;
          entry.started.splice(entry.started.indexOf(now), 1);
          if (answered) entry.answeredAt = at;
          if (entry.started.length === 0) destinations.delete(destination);
          noteTimingOut(destination, answered, at);
          wakeOne(destination);
        },
      };
    },
    /**
     * Resolves when a slot of `destination` frees (waiters are woken one per release, oldest
     * first, so a batch that waited longest goes next), or after `waitMs` at the latest.
     */
    freed(destination: string, waitMs: number): Promise<void> {
      return new Promise((resolve) => {
        const waiter = {
          destination,
          wake: () => {
            clearTimeout(timer);
            resolve();
          },
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          resolve();
        }, waitMs);
        waiters.push(waiter);
      });
    },
    /** Attempts in flight to `destination`. */
    inFlight: (destination: string) => destinations.get(destination)?.started.length ?? 0,
    /** Whether `destination` is timing out (its latest attempt got no answer, and none since). */
    timingOut: (destination: string) => timingOut.has(destination),
  };
}

export type DestinationSlots = ReturnType<typeof destinationSlots>;
