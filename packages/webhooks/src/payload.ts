import { plantEventBody } from "@plant-store/contracts";

/**
 * The delivery body of an event: `{"type", "timestamp", "data"}` with the plant as a NewPlant (`id`,
 * `name`, `tag` when it has one), the id an exact JSON number. The contracts own it
 * (`plantEventBody`): the api's live event streams send the same text.
 */
export const webhookBody = plantEventBody;
