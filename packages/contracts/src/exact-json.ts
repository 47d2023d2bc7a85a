import { parse } from "lossless-json";

// How a JSON text becomes a value exactly as the service judges a request body: numbers without
// loss, a key repeated with another value refused. The api's body parser (POST /plants and every
// other JSON body) and the worker's import lines (one NewPlant per NDJSON line) both use it, so a
// line of an import is judged as the same text POSTed would be.

const JSON_NUMBER = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;
/** A plain integer of at most 15 digits (no `-0`): always a safe integer, taken as is. */
const SHORT_INTEGER = /^(?:-?[1-9]\d{0,14}|0)$/;
/** Stands for an integer too large for any int64, without computing it (`1e999999999`). */
const OUT_OF_RANGE = 2n ** 64n;

/**
 * The exact value of a JSON number: integers (also `1.0`, `1e3`) up to 20 digits become a number
 * when they are safe integers and a bigint otherwise. Any other number (a fraction, or an integer
 * beyond 20 digits) no JavaScript value holds exactly: it becomes a symbol named by its exact value
 * (sign, significant digits, power of ten), one symbol per value in `inexact`, so lossless-json's
 * duplicate-key check, which compares values, tells `1e30` from `2e30` and `0.1` from
 * `0.10000000000000001` yet sees `1.5` and `15e-1` as one value. `approximate` replaces them after.
 */
function exactJsonNumber(text: string, inexact: Map<string, symbol>): number | bigint | symbol {
  if (SHORT_INTEGER.test(text)) return Number(text); // most numbers: no digit-by-digit work
  const match = JSON_NUMBER.exec(text);
  if (!match) throw new SyntaxError(`Invalid number '${text}'`);
  const [, sign = "", whole = "", fraction = "", exponent = "0"] = match;
  const significant = `${whole}${fraction}`.replace(/^0+/, "");
  if (significant === "") return 0;
  const digits = significant.replace(/0+$/, "");
  // A bigint: an exponent of any length is kept exactly.
  const scale = BigInt(exponent) - BigInt(fraction.length - (significant.length - digits.length));
  if (scale >= 0n && BigInt(digits.length) + scale <= 20n) {
    const value = BigInt(`${sign}${digits}`) * 10n ** scale;
    const asNumber = Number(value);
    return Number.isSafeInteger(asNumber) ? asNumber : value;
  }
  const exact = `${sign}${digits}e${scale}`;
  const known = inexact.get(exact);
  if (known !== undefined) return known;
  const symbol = Symbol(exact);
  inexact.set(exact, symbol);
  return symbol;
}

/**
 * What a number no JavaScript value holds exactly is validated as: an integer beyond 20 digits a
 * stand-in of that sign beyond any int64, a fraction its nearest double — or NaN when that double
 * is an integer (9007199254740993.5), so it can never pass as one.
 */
function approximate(exact: string): number | bigint {
  if (!exact.includes("e-")) return exact.startsWith("-") ? -OUT_OF_RANGE : OUT_OF_RANGE;
  const value = Number(exact);
  return Number.isInteger(value) ? Number.NaN : value;
}

/** Replaces, in place and without recursion (the value may be deeply nested), the symbols exactJsonNumber left. */
function replaceInexactNumbers(root: unknown): unknown {
  const settle = (value: unknown) => (typeof value === "symbol" ? approximate(value.description ?? "") : value);
  const pending: unknown[] = [root];
  for (let value = pending.pop(); value !== undefined; value = pending.pop()) {
    if (typeof value !== "object" || value === null) continue;
    const container = value as Record<string, unknown>;
    for (const key of Object.keys(container)) {
      container[key] = settle(container[key]);
      pending.push(container[key]);
    }
  }
  return settle(root);
}

/** Why a JSON text was refused: a sentence for the client. */
export class ExactJsonError extends Error {
  override name = "ExactJsonError";
}

/**
 * Parses JSON text exactly: integers keep every digit (a bigint beyond 2^53), a key repeated with
 * another value is refused (an exact repeat counts once). Throws ExactJsonError with a sentence
 * that starts with `subject` ("The request body is not valid JSON: …").
 */
export function parseExactJson(text: string, subject: string): unknown {
  const inexact = new Map<string, symbol>();
  try {
    const value = parse(text, null, {
      parseNumber: (number) => exactJsonNumber(number, inexact),
      // lossless-json calls this only for a key repeated with another value.
      onDuplicateKey: ({ key }) => {
        throw new SyntaxError(`Duplicate key '${key}'`);
      },
    });
    return inexact.size === 0 ? value : replaceInexactNumbers(value);
  } catch (error) {
    if (error instanceof RangeError) throw new ExactJsonError(`${subject} is nested too deeply`);
    throw new ExactJsonError(`${subject} is not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * JSON.rawJSON (Node 21+; TypeScript's ES2023 library does not declare it yet). On an older Node,
 * a bigint's answer fails saying why, not with "rawJSON is not a function".
 */
const rawJSON =
  (JSON as unknown as { rawJSON?: (text: string) => unknown }).rawJSON ??
  (() => {
    throw new Error("JSON.rawJSON is missing: the service needs Node.js 22.12+ (package.json engines)");
  });

/**
 * A value JSON.stringify writes exactly: each bigint (an int64 beyond 2^53, on which it throws)
 * as a JSON.rawJSON of its digits, in a copy of only the arrays and plain objects that hold one;
 * a value holding none is returned as is. Natively, faster than lossless-json's stringify for the
 * same text (tools/bench/scripts/int64-json.mjs). Walks the value by recursion: for response bodies.
 */
export function withRawBigInts(value: unknown): unknown {
  if (typeof value === "bigint") return rawJSON(value.toString());
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const item = withRawBigInts(value[i]);
      if (item === value[i]) continue;
      copy ??= value.slice();
      copy[i] = item;
    }
    return copy ?? value;
  }
  const object = value as Record<string, unknown>;
  let copy: Record<string, unknown> | undefined;
  for (const key of Object.keys(object)) {
    const item = withRawBigInts(object[key]);
    if (item === object[key]) continue;
    copy ??= { ...object };
    copy[key] = item;
  }
  return copy ?? value;
}

type Issue = { message: string; path: PropertyKey[] };

/** Validation issues as sentences naming their fields (the contracts' own messages already do). */
export const describeIssues = (issues: readonly Issue[]) =>
  issues
    .map(({ message, path }) => {
      const field = path.map(String).join(".");
      return field === "" || message.startsWith(String(path[0])) ? message : `${field}: ${message}`;
    })
    .join("; ");
