import { PlantTag } from "@plant-store/contracts";
import { z } from "zod";
import { LastEventId } from "../events/subscription.js";
import type { LiveEvents } from "../resource/module.js";
import { EVENTS_PATH } from "./rest.js";

/** The subscription `plants.events`'s input: a tag to follow, and the cursor to resume after. */
export const PlantEventsInput = z.object({ tag: PlantTag.optional(), lastEventId: LastEventId }).optional();

/** The plants' live events: `GET /plants/events` and `plants.events`, a stream following one tag at most. */
export const plantLiveEvents: LiveEvents = {
  path: EVENTS_PATH,
  procedure: "plants.events",
  scope: "plants:read",
  input: PlantEventsInput,
  topic: { param: "tag", schema: PlantTag },
};
