import { describe, expect, it } from "vitest";
import { destinationSlots } from "../src/destination-slots.js";

const slotOf = (taken: ReturnType<ReturnType<typeof destinationSlots>["take"]>) => {
  if (!("release" in taken)) throw new Error(`no slot: wait ${taken.waitMs} ms`);
  return taken;
};

describe("destinationSlots", () => {
  const noJitter = () => 0;

  it("gives a destination that never answered its quiet share, the others keep theirs", () => {
    const slots = destinationSlots({ quiet: 2, answering: 4 }, 10_000, noJitter);
    slotOf(slots.take("https://stuck.example/hook", 0));
    slotOf(slots.take("https://stuck.example/hook", 0));
    expect(slots.take("https://stuck.example/hook", 50)).toEqual({ waitMs: 100 });
    // The longer it stays silent, the longer the turned-away attempts wait, up to the timeout.
    expect(slots.take("https://stuck.example/hook", 3000)).toEqual({ waitMs: 3000 });
    expect(slots.take("https://stuck.example/hook", 60_000)).toEqual({ waitMs: 10_000 });
    expect(slots.inFlight("https://stuck.example/hook")).toBe(2);
    slotOf(slots.take("https://healthy.example/hook", 60_000));
    expect(slots.inFlight("https://healthy.example/hook")).toBe(1);
  });

  it("keeps at most `total` attempts in flight over all destinations", () => {
    const slots = destinationSlots({ quiet: 2, answering: 3, total: 3 }, 10_000, noJitter);
    const t = Date.now();
    const a = slotOf(slots.take("https://a.example/hook", t));
    slotOf(slots.take("https://a.example/hook", t));
    slotOf(slots.take("https://b.example/hook", t));
    // All three in flight: another destination waits too, briefly.
    expect(slots.take("https://c.example/hook", t)).toEqual({ waitMs: 100 });
    a.release(true, t);
    slotOf(slots.take("https://c.example/hook", t));
  });

  it("wakes the batches waiting for a destination one per freed slot, the longest-waiting first", async () => {
    const slots = destinationSlots({ quiet: 1, answering: 1 }, 10_000, noJitter);
    const url = "https://busy.example/hook";
    const held = slotOf(slots.take(url));
    const woken: string[] = [];
    const first = slots.freed(url, 5000).then(() => woken.push("first"));
    const second = slots.freed(url, 5000).then(() => woken.push("second"));
    held.release(true);
    await first;
    expect(woken).toEqual(["first"]);
    slotOf(slots.take(url)).release(true);
    await second;
    expect(woken).toEqual(["first", "second"]);
    // Nobody frees a slot: the wait ends after its time anyway.
    const stuck = slotOf(slots.take(url));
    const started = Date.now();
    await slots.freed(url, 50);
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);
    stuck.release(false);
  });

  it("lets a destination that answers use its larger share while it answers, and frees slots on release", () => {
    const slots = destinationSlots({ quiet: 2, answering: 3 }, 10_000, noJitter);
    const url = "https://busy.example/hook";
    const t = Date.now();
    const a = slotOf(slots.take(url, t));
    const b = slotOf(slots.take(url, t));
    expect(slots.take(url, t)).toEqual({ waitMs: 100 });
    a.release(true, t);
    a.release(true, t + 5); // once only
    expect(slots.inFlight(url)).toBe(1);
    // It answered: three in flight now, and a turned-away attempt comes back soon.
    const c = slotOf(slots.take(url, t + 10));
    const d = slotOf(slots.take(url, t + 10));
    expect(slots.take(url, t + 10)).toEqual({ waitMs: 100 });
    // Silent for over a second: back to its quiet share, the waits growing with the silence.
    expect(slots.take(url, t + 1500)).toEqual({ waitMs: 1500 });
    for (const slot of [b, c, d]) slot.release(false, t + 1600);
    expect(slots.inFlight(url)).toBe(0);
    // Forgotten once nothing is in flight: quiet again until it answers.
    slotOf(slots.take(url));
    slotOf(slots.take(url));
    expect(slots.take(url)).toHaveProperty("waitMs");
  });
});
