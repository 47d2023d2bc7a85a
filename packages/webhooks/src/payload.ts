import { IMPORT_FINISHED_EVENT, type ImportSummary } from "@plant-store/contracts";

// A change event's delivery body is its resource's (ResourceEvents.body in the contracts): the
// api's live event streams send the same text.

/**
 * The delivery body of an import's end: `{"type": "import.finished", "timestamp", "data"}` with the
 * import's state and counts as `GET /plants/imports/{id}` lists it (its line errors left out: read
 * the import for them); `timestamp` is when it finished.
 */
export function importFinishedBody(summary: ImportSummary): string {
  const timestamp = summary.finishedAt ?? new Date().toISOString();
  return JSON.stringify({ type: IMPORT_FINISHED_EVENT, timestamp, data: summary });
}
