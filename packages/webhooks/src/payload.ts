import { IMPORT_FINISHED_EVENT, type ImportSummary, type PlantEvent } from "@plant-store/contracts";

/**
 * The delivery body of an event: `{"type", "timestamp", "data"}` with the plant as a NewPlant
 * (`id`, `name`, `tag` when it has one) — for an update the plant as it now is, for a delete as it
 * was. The id is written as an exact JSON number, every digit of the int64 (JSON.stringify has
 * no bigint); `timestamp` is when the api accepted the change (RFC 3339).
 */
export function webhookBody(event: PlantEvent): string {
  if (!/^-?\d{1,19}$/.test(event.plantId)) throw new Error(`not an int64 plant id: ${event.plantId}`);
  const tag = event.tag === undefined ? "" : `,"tag":${JSON.stringify(event.tag)}`;
  const data = `{"id":${event.plantId},"name":${JSON.stringify(event.name)}${tag}}`;
  return `{"type":${JSON.stringify(event.type)},"timestamp":${JSON.stringify(event.at)},"data":${data}}`;
}

/**
 * The delivery body of an import's end: `{"type": "import.finished", "timestamp", "data"}` with the
 * import's state and counts as `GET /plants/imports/{id}` lists it (its line errors left out: read
 * the import for them); `timestamp` is when it finished.
 */
export function importFinishedBody(summary: ImportSummary): string {
  const timestamp = summary.finishedAt ?? new Date().toISOString();
  return JSON.stringify({ type: IMPORT_FINISHED_EVENT, timestamp, data: summary });
}
