import { importLimits } from "@plant-store/contracts";

/** Lines per stored chunk: what one import step commits and checkpoints (the worker's batch). */
export const CHUNK_LINES = 1000;
/** A chunk is cut at the first line break past this many bytes, whatever its lines. */
export const CHUNK_BYTES = 1024 * 1024;

const NEWLINE = Buffer.from("\n");

/**
 * Cuts an upload, as its bytes arrive, into chunks of whole lines (each ended by a line break), for
 * the store. It holds at most one chunk and the line being read: a line longer than a POST body
 * may be (it is judged invalid anyway) is kept only up to that length plus two bytes, enough for
 * the worker to see that it is too long. Counts every line and byte, and says when the upload is
 * past its limits.
 */
export class UploadChunker {
  /** Lines read so far (a last line without a line break counts once the upload ends). */
  lines = 0;
  /** Bytes read so far. */
  bytes = 0;
  /** Set once the upload is past a limit: it will not be stored. */
  exceeded: "lines" | "bytes" | undefined;

  #parts: Buffer[] = [];
  #partsBytes = 0;
  #chunkLines = 0;
  #line: Buffer[] = [];
  #lineKept = 0;
  #lineLength = 0;
  readonly #limits: { maxLines: number; maxBytes: number };

  constructor(limits: { maxLines: number; maxBytes: number }) {
    this.#limits = limits;
  }

  /** Reads the next bytes; the chunks now complete, in order. */
  push(data: Buffer): Buffer[] {
    const chunks: Buffer[] = [];
    this.bytes += data.length;
    if (this.bytes > this.#limits.maxBytes) {
      this.exceeded = "bytes";
      return chunks;
    }
    let start = 0;
    while (start < data.length) {
      const newline = data.indexOf(0x0a, start);
      this.#keep(data.subarray(start, newline === -1 ? data.length : newline));
      if (newline === -1) break;
      this.#endLine(chunks);
      if (this.exceeded) return chunks;
      start = newline + 1;
    }
    return chunks;
  }

  /** The upload is complete: the last chunk (with the last line, if it had no line break). */
  end(): Buffer[] {
    const chunks: Buffer[] = [];
    if (this.#lineLength > 0) this.#endLine(chunks);
    if (!this.exceeded && this.#chunkLines > 0) chunks.push(this.#cut());
    return chunks;
  }

  /** Part of the current line; what is beyond a line's useful length is counted, not kept. */
  #keep(part: Buffer) {
    this.#lineLength += part.length;
    const room = importLimits.lineMaxBytes + 2 - this.#lineKept;
    if (room <= 0 || part.length === 0) return;
    const kept = part.length <= room ? part : part.subarray(0, room);
    this.#line.push(kept);
    this.#lineKept += kept.length;
  }

  #endLine(chunks: Buffer[]) {
    this.lines++;
    if (this.lines > this.#limits.maxLines) {
      this.exceeded = "lines";
      return;
    }
    for (const part of this.#line) this.#parts.push(part);
    this.#parts.push(NEWLINE);
    this.#partsBytes += this.#lineKept + 1;
    this.#chunkLines++;
    this.#line = [];
    this.#lineKept = 0;
    this.#lineLength = 0;
    if (this.#chunkLines >= CHUNK_LINES || this.#partsBytes >= CHUNK_BYTES) chunks.push(this.#cut());
  }

  #cut(): Buffer {
    const chunk = Buffer.concat(this.#parts, this.#partsBytes);
    this.#parts = [];
    this.#partsBytes = 0;
    this.#chunkLines = 0;
    return chunk;
  }
}
