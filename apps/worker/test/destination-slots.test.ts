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

  it("lets destinations timing out hold at most `timingOut` slots between them, until one answers again", () => {
    const slots = destinationSlots({ quiet: 3, answering: 6, total: 20, timingOut: 3 }, 10_000, noJitter);
    const [a, b, c] = ["https://a.example/hook", "https://b.example/hook", "https://c.example/hook"];
    const t = 1_000_000;
    // Their first attempts: each its quiet share, none timing out yet; none gets an answer.
    const first = [a, a, a, b, b, b].map((url) => slotOf(slots.take(url, t)));
    for (const slot of first) slot.release(false, t + 3000);
    expect([a, b, c].map((url) => slots.timingOut(url))).toEqual([true, true, false]);

    // Timing out now: three slots between the two, though each has a share of three.
    const held = [slotOf(slots.take(a, t + 3000)), slotOf(slots.take(a, t + 3000)), slotOf(slots.take(b, t + 3000))];
    // Turned away for as long as it has gone without an answer (2 s here), as a silent destination is.
    expect(slots.take(b, t + 5000)).toEqual({ waitMs: 2000 });
    // A destination that is not timing out keeps its share.
    for (let i = 0; i < 3; i++) slotOf(slots.take(c, t + 5000));

    // One of a's is answered: a no longer times out, and its attempts count beside the pool, not in it.
    held[0]?.release(true, t + 5000);
    expect(slots.timingOut(a)).toBe(false);
    slotOf(slots.take(a, t + 5000));
    slotOf(slots.take(b, t + 5000));
    expect(slots.take(b, t + 5000)).toEqual({ waitMs: 2000 }); // a's one begun before, and b's two
    held[1]?.release(false, t + 6000); // begun while a timed out: frees a slot of the pool
    expect(slots.timingOut(a)).toBe(true); // its latest attempt got no answer: timing out again
    slotOf(slots.take(b, t + 6000));
  });
});
