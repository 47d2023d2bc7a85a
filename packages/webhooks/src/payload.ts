import { IMPORT_FINISHED_EVENT, type ImportSummary, plantEventBody } from "@plant-store/contracts";

/**
 * The delivery body of an event: `{"type", "timestamp", "data"}` with the plant as a NewPlant (`id`,
 * `name`, `tag` when it has one), the id an exact JSON number. The contracts own it
 * (`plantEventBody`): the api's live event streams send the same text.
 */
export const webhookBody = plantEventBody;

/**
 * The delivery body of an import's end: `{"type": "import.finished", "timestamp", "data"}` with the
 * import's state and counts as `GET /plants/imports/{id}` lists it (its line errors left out: read
 * the import for them); `timestamp` is when it finished.
 */
export function importFinishedBody(summary: ImportSummary): string {
  const timestamp = summary.finishedAt ?? new Date().toISOString();
  return JSON.stringify({ type: IMPORT_FINISHED_EVENT, timestamp, data: summary });
}
