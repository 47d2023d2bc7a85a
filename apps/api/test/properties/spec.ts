// The specification's rules, as docs/api.md and the document state them, written here on their own
// so that the property suite judges the service without the contracts' zod schemas, limits or
// parser: a regression in a schema (say, an id schema that accepts "5") or in a limit makes the
// service disagree with this oracle. A create body is judged from its raw text:
//   the body is at most 16 384 bytes, UTF-8 (a leading BOM dropped), one JSON value (RFC 8259); a
//   key repeated with another value is refused, an exact repeat counts once; it must be an object;
//   NewPlant: id a JSON number literal that is an integer in int64 (1.0 and 1e3 are integers, as in
//   JSON Schema; "5", true, null, 1.5 are not); name a string of 1–200 Unicode characters (code
//   points), tag (optional) 1–100, both well-formed (no lone surrogates); other properties ignored.
//   List query: limit 1–100, tag as above, cursor as the service issues it (22 base64url
//   characters: the contract's PageCursor). Path id: decimal int64.

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;
export const NAME_MAX = 200;
export const TAG_MAX = 100;
export const BODY_MAX_BYTES = 16_384;

const isText = (value: unknown, max: number): value is string =>
  typeof value === "string" && value.isWellFormed() && [...value].length >= 1 && [...value].length <= max;

export type Verdict<T> = { valid: true; value: T } | { valid: false; fields: string[] };

/* ---------- JSON, read exactly from its text ---------- */

/** A JSON value as its text means it: numbers kept as their literal, members in order (repeats kept). */
export type JsonValue =
  | { kind: "number"; literal: string }
  | { kind: "string"; value: string }
  | { kind: "true" | "false" | "null" }
  | { kind: "array"; items: JsonValue[] }
  | { kind: "object"; members: [string, JsonValue][] };

class JsonSyntaxError extends Error {}

const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/**
 * Reads one JSON text (RFC 8259: whitespace is space, tab, LF, CR only; no control characters in
 * strings; `\uXXXX` escapes may leave lone surrogates). Iterative, so any nesting depth is read.
 */
export function readJson(text: string): { ok: true; value: JsonValue; depth: number } | { ok: false; error: string } {
  let at = 0;
  let depth = 0;
  const fail = (problem: string): never => {
    throw new JsonSyntaxError(`${problem} at ${at}`);
  };
  const space = () => {
    while (at < text.length && " \t\n\r".includes(text[at] as string)) at++;
  };
  const string = (): string => {
    if (text[at] !== '"') fail("a string expected");
    at++;
    let out = "";
    for (;;) {
      if (at >= text.length) fail("an unterminated string");
      const char = text[at] as string;
      if (char === '"') {
        at++;
        return out;
      }
      if (char.charCodeAt(0) < 0x20) fail("a control character in a string");
      if (char !== "\\") {
        out += char;
        at++;
        continue;
      }
      const escaped = text[at + 1] ?? "";
      if (Object.hasOwn(ESCAPES, escaped)) {
        out += ESCAPES[escaped];
        at += 2;
      } else if (escaped === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(at + 2, at + 6))) {
        out += String.fromCharCode(Number.parseInt(text.slice(at + 2, at + 6), 16));
        at += 6;
      } else {
        fail("a bad escape");
      }
    }
  };
  const scalar = (): JsonValue => {
    const char = text[at];
    if (char === '"') return { kind: "string", value: string() };
    for (const word of ["true", "false", "null"] as const) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return { kind: word };
      }
    }
    NUMBER.lastIndex = at;
    const match = NUMBER.exec(text);
    if (!match) return fail("a value expected");
    at += match[0].length;
    return { kind: "number", literal: match[0] };
  };
  /** An open array, or an open object with the key of the member being read. */
  type Open = { kind: "array"; items: JsonValue[] } | { kind: "object"; members: [string, JsonValue][]; key: string };
  const memberKey = () => {
    const key = string();
    space();
    if (text[at] !== ":") fail("':' expected");
    at++;
    return key;
  };
  const open: Open[] = [];
  try {
    for (;;) {
      space();
      let value: JsonValue;
      if (text[at] === "[" || text[at] === "{") {
        const array = text[at] === "[";
        at++;
        space();
        if (text[at] === (array ? "]" : "}")) {
          at++;
          depth = Math.max(depth, open.length + 1);
          value = array ? { kind: "array", items: [] } : { kind: "object", members: [] };
        } else {
          open.push(array ? { kind: "array", items: [] } : { kind: "object", members: [], key: memberKey() });
          depth = Math.max(depth, open.length);
          continue;
        }
      } else {
        value = scalar();
      }
      // Put the value in its container; close the containers that end here.
      let top = open.at(-1);
      for (; top !== undefined; top = open.at(-1)) {
        if (top.kind === "array") top.items.push(value);
        else top.members.push([top.key, value]);
        space();
        if (text[at] === ",") {
          at++;
          space();
          if (top.kind === "object") top.key = memberKey();
          break;
        }
        if (text[at] !== (top.kind === "array" ? "]" : "}")) fail("',' or the end of a container expected");
        at++;
        open.pop();
        value = top.kind === "array" ? { kind: "array", items: top.items } : { kind: "object", members: top.members };
      }
      if (top === undefined) {
        space();
        if (at !== text.length) fail("text after the value");
        return { ok: true, value, depth };
      }
    }
  } catch (error) {
    if (error instanceof JsonSyntaxError) return { ok: false, error: error.message };
    throw error;
  }
}

/** A number literal's exact value as sign, digits without trailing zeros, and a power of ten. */
function exactNumber(literal: string): { negative: boolean; digits: string; exponent: bigint } {
  const match = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(literal);
  if (!match) throw new Error(`not a JSON number: ${literal}`);
  const [, sign = "", whole = "", fraction = "", exponent = "0"] = match;
  const significant = `${whole}${fraction}`.replace(/^0+/, "");
  const digits = significant.replace(/0+$/, "");
  if (digits === "") return { negative: false, digits: "0", exponent: 0n };
  const trailing = BigInt(significant.length - digits.length);
  return { negative: sign === "-", digits, exponent: BigInt(exponent) - BigInt(fraction.length) + trailing };
}

/** The int64 a number literal stands for, if it is an integer (1.0, 1e3 and 10e-1 are) in range. */
export function int64OfLiteral(literal: string): bigint | undefined {
  const { negative, digits, exponent } = exactNumber(literal);
  // No trailing zeros: with a negative exponent the value has a fractional part.
  if (exponent < 0n) return undefined;
  // At least 10^19, beyond int64, without computing a power like 10^999999999.
  if (BigInt(digits.length) - 1n + exponent >= 19n) return undefined;
  const magnitude = BigInt(digits) * 10n ** exponent;
  const value = negative ? -magnitude : magnitude;
  return value >= INT64_MIN && value <= INT64_MAX ? value : undefined;
}

/** Whether two JSON values mean the same (numbers by exact value, objects by members). */
function sameValue(a: JsonValue, b: JsonValue): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind === "number" && b.kind === "number") {
    const [x, y] = [exactNumber(a.literal), exactNumber(b.literal)];
    return x.negative === y.negative && x.digits === y.digits && x.exponent === y.exponent;
  }
  if (a.kind === "string" && b.kind === "string") return a.value === b.value;
  if (a.kind === "array" && b.kind === "array")
    return a.items.length === b.items.length && a.items.every((item, i) => sameValue(item, b.items[i] as JsonValue));
  if (a.kind === "object" && b.kind === "object") {
    const [x, y] = [membersOf(a), membersOf(b)];
    return x.size === y.size && [...x].every(([key, value]) => y.has(key) && sameValue(value, y.get(key) as JsonValue));
  }
  return true; // true, false, null
}

/** An object's members by key (an exact repeat counts once). */
const membersOf = (object: { members: [string, JsonValue][] }) => new Map(object.members);

/** The first key, at any depth, repeated with another value. */
function conflictingKey(root: JsonValue): string | undefined {
  const pending: JsonValue[] = [root];
  for (let value = pending.pop(); value !== undefined; value = pending.pop()) {
    if (value.kind === "array") pending.push(...value.items);
    if (value.kind !== "object") continue;
    const seen = new Map<string, JsonValue>();
    for (const [key, member] of value.members) {
      const earlier = seen.get(key);
      if (earlier !== undefined && !sameValue(earlier, member)) return key;
      seen.set(key, member);
      pending.push(member);
    }
  }
  return undefined;
}

/** How a create body reads; `depth` is its deepest nesting of arrays and objects. */
export type BodyVerdict =
  | { kind: "not-json"; error: string }
  | { kind: "duplicate"; key: string; depth: number }
  | { kind: "not-object"; depth: number }
  | { kind: "invalid"; fields: string[]; depth: number }
  | { kind: "valid"; value: { id: bigint; name: string; tag?: string }; depth: number };

/** A body that is a JSON object without conflicting keys: its members; otherwise why it is refused. */
type ObjectBody = { kind: "object"; members: Map<string, JsonValue>; depth: number };

/** Reads a body's text (already UTF-8 decoded, BOM dropped) as the object every body must be. */
export function readObjectBody(text: string): ObjectBody | Exclude<BodyVerdict, { kind: "invalid" | "valid" }> {
  const read = readJson(text);
  if (!read.ok) return { kind: "not-json", error: read.error };
  const duplicate = conflictingKey(read.value);
  const { depth } = read;
  if (duplicate !== undefined) return { kind: "duplicate", key: duplicate, depth };
  if (read.value.kind !== "object") return { kind: "not-object", depth };
  return { kind: "object", members: membersOf(read.value), depth };
}

/** What the specification makes of a create body's text (already UTF-8 decoded, BOM dropped). */
export function judgeCreateBody(text: string): BodyVerdict {
  const body = readObjectBody(text);
  if (body.kind !== "object") return body;
  const { members, depth } = body;
  const id = members.get("id");
  const name = members.get("name");
  const tag = members.get("tag");
  const idValue = id?.kind === "number" ? int64OfLiteral(id.literal) : undefined;
  const nameValue = name?.kind === "string" ? name.value : undefined;
  const tagValue = tag?.kind === "string" ? tag.value : undefined;
  const fields: string[] = [];
  if (idValue === undefined) fields.push("id");
  if (!isText(nameValue, NAME_MAX)) fields.push("name");
  if (tag !== undefined && !isText(tagValue, TAG_MAX)) fields.push("tag");
  if (fields.length > 0 || idValue === undefined || nameValue === undefined) return { kind: "invalid", fields, depth };
  const value =
    tagValue === undefined ? { id: idValue, name: nameValue } : { id: idValue, name: nameValue, tag: tagValue };
  return { kind: "valid", value, depth };
}

/** How an update body reads: a PUT's is a Plant, a PATCH's a merge patch of one. */
export type UpdateVerdict =
  | Exclude<BodyVerdict, { kind: "valid" }>
  | { kind: "valid"; value: { name?: string; tag?: string | null }; depth: number };

/**
 * What docs/api.md makes of a PUT or PATCH body for the plant `pathId`. Both: an `id`, when present,
 * must be the path's — checked before the rest, so a wrong id is the only field named. PUT: `name`
 * required, `tag` optional (its absence removes the tag). PATCH: `name` and `tag` only when given,
 * `tag: null` removes the tag, `name: null` is invalid. Unknown members are dropped.
 */
export function judgeUpdateBody(method: "PUT" | "PATCH", text: string, pathId: bigint): UpdateVerdict {
  const body = readObjectBody(text);
  if (body.kind !== "object") return body;
  const { members, depth } = body;
  const id = members.get("id");
  const name = members.get("name");
  const tag = members.get("tag");
  const nameValue = name?.kind === "string" ? name.value : undefined;
  const tagValue = tag?.kind === "string" ? tag.value : undefined;
  if (id !== undefined && (id.kind !== "number" || int64OfLiteral(id.literal) !== pathId)) {
    return { kind: "invalid", fields: ["id"], depth };
  }
  if (method === "PUT") {
    const fields: string[] = [];
    if (!isText(nameValue, NAME_MAX)) fields.push("name");
    if (tag !== undefined && !isText(tagValue, TAG_MAX)) fields.push("tag");
    if (fields.length > 0 || nameValue === undefined) return { kind: "invalid", fields, depth };
    return { kind: "valid", value: { name: nameValue, tag: tagValue ?? null }, depth };
  }
  const fields: string[] = [];
  if (name !== undefined && !isText(nameValue, NAME_MAX)) fields.push("name");
  if (tag !== undefined && tag.kind !== "null" && !isText(tagValue, TAG_MAX)) fields.push("tag");
  if (fields.length > 0) return { kind: "invalid", fields, depth };
  const value: { name?: string; tag?: string | null } = {};
  if (nameValue !== undefined) value.name = nameValue;
  if (tag !== undefined) value.tag = tagValue ?? null;
  return { kind: "valid", value, depth };
}

/** Whether a list query (values as a server parses them; repeats are arrays) is valid. */
export function judgeListQuery(query: Record<string, unknown>): Verdict<true> {
  const fields: string[] = [];
  const { limit, tag, cursor } = query;
  if (limit !== undefined && !(typeof limit === "string" && /^[0-9]{1,3}$/.test(limit) && +limit >= 1 && +limit <= 100))
    fields.push("limit");
  if (tag !== undefined && !isText(tag, TAG_MAX)) fields.push("tag");
  if (cursor !== undefined && !(typeof cursor === "string" && /^[A-Za-z0-9_-]{22}$/.test(cursor)))
    fields.push("cursor");
  return fields.length > 0 ? { valid: false, fields } : { valid: true, value: true };
}

/** Whether a decoded path id is a decimal int64. */
export function judgePathId(decoded: unknown): Verdict<bigint> {
  if (typeof decoded !== "string" || !/^-?[0-9]{1,19}$/.test(decoded)) return { valid: false, fields: ["id"] };
  const id = BigInt(decoded);
  return id >= INT64_MIN && id <= INT64_MAX ? { valid: true, value: id } : { valid: false, fields: ["id"] };
}
