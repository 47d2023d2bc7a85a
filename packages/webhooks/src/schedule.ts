/**
 * When a failed delivery is tried again: the delays after the first attempt, in ms. The default
 * follows the best providers: a first retry within 5 seconds, the last about a day after the
 * first attempt (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: 8 attempts over ~27.6 h).
 */
export const DEFAULT_RETRY_SCHEDULE = "5s,5m,30m,2h,5h,10h,10h";

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Parses a schedule such as `5s,5m,2h` (units ms, s, m, h); throws with a readable message. */
export function parseRetrySchedule(text: string): number[] {
  const delays = text.split(",").map((part) => {
    const match = /^\s*(\d+)(ms|s|m|h)\s*$/.exec(part);
    if (!match) throw new Error(`"${part.trim()}" is not a delay such as 500ms, 5s, 5m or 2h`);
    return Number(match[1]) * (UNIT_MS[match[2] as string] as number);
  });
  if (delays.length === 0 || delays.length > 20) throw new Error("the schedule must list 1 to 20 delays");
  return delays;
}

/**
 * The delay before attempt `attemptsMade + 1`, with jitter: 80–100 % of the scheduled delay, so
 * receivers that came back are not hit by every retry at once and no retry comes later than
 * scheduled. Undefined when the schedule is exhausted.
 */
export function retryDelay(
  schedule: readonly number[],
  attemptsMade: number,
  random = Math.random,
): number | undefined {
  const delay = schedule[attemptsMade - 1];
  return delay === undefined ? undefined : Math.round(delay * (0.8 + 0.2 * random()));
}
