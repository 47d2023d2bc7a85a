import fc from "fast-check";
import { TOKEN } from "../stack.js";
import { BODY_MAX_BYTES, INT64_MAX, INT64_MIN, NAME_MAX, TAG_MAX } from "./spec.js";

/**
 * JSON as text, built structurally so that what JSON.stringify cannot write can be written too:
 * duplicate keys, `__proto__` as an own key, numbers of any length, lone surrogates, every
 * character escaped. `value` is what the generator meant (integers as bigint when beyond
 * ±(2^53−1)), used to shape cases; the oracle (spec.ts) judges the text itself.
 */
export type Json = { text: string; value: unknown };

const NOT_SAFE = Number.NaN;

/** A string literal: plain JSON.stringify, or with every UTF-16 unit escaped (\uXXXX). */
export const jsonString = (value: string): fc.Arbitrary<Json> =>
  fc.constantFrom("plain", "escaped").map((style) => ({
    text:
      style === "plain"
        ? JSON.stringify(value)
        : `"${[...Array(value.length).keys()].map((i) => `\\u${value.charCodeAt(i).toString(16).padStart(4, "0")}`).join("")}"`,
    value,
  }));

const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);
/** The value lossless parsing gives an integer: a number when safe, else a bigint. */
const integerValue = (id: bigint) => (id >= -SAFE_MAX && id <= SAFE_MAX ? Number(id) : id);

const EDGES = [
  INT64_MIN,
  INT64_MIN + 1n,
  -(2n ** 53n) - 1n,
  -(2n ** 53n),
  -SAFE_MAX,
  -1n,
  0n,
  1n,
  SAFE_MAX,
  2n ** 53n,
  2n ** 53n + 1n,
  INT64_MAX - 1n,
  INT64_MAX,
];

/** Any int64, the edges and the 2^53 boundary often. */
export const int64 = fc.oneof(
  { weight: 2, arbitrary: fc.constantFrom(...EDGES) },
  { weight: 4, arbitrary: fc.bigInt({ min: INT64_MIN, max: INT64_MAX }) },
  { weight: 2, arbitrary: fc.bigInt({ min: -(2n ** 54n), max: 2n ** 54n }) },
  { weight: 1, arbitrary: fc.integer().map(BigInt) },
);

/** An integer written in one of the ways JSON Schema counts as an integer: 7, 7.0, 7e0, 70e-1, 700E-2. */
export const integerText = (id: bigint): fc.Arbitrary<Json> =>
  fc
    .constantFrom("plain", "fraction", "exponent", "scaled", "scaled2", "negzero")
    .map((style) => {
      const text = String(id);
      switch (style) {
        case "fraction":
          return `${text}.000`;
        case "exponent":
          return `${text}E+0`;
        case "scaled":
          return id === 0n ? "0e-1" : `${text}0e-1`;
        case "scaled2":
          return id === 0n ? "0.00E-2" : `${text}00E-2`;
        case "negzero":
          return id === 0n ? "-0.0" : `${text}.0`;
        default:
          return text;
      }
    })
    .map((text) => ({ text, value: integerValue(id) }));

/** Text of 1..max code points: any Unicode (astral, controls, U+2028, BOM, combining marks, quotes). */
export const unicodeText = (maxLength: number) =>
  fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength }) },
    { weight: 2, arbitrary: fc.string({ unit: "grapheme", minLength: 1, maxLength: Math.floor(maxLength / 4) }) },
    {
      weight: 2,
      arbitrary: fc.string({
        unit: fc.constantFrom(
          "\u0000",
          "\u001f",
          "\u007f",
          "\u2028",
          "\ufeff",
          '"',
          "\\",
          "/",
          "🌵",
          "\u{10ffff}",
          "e\u0301",
          "\ud83d\ude00",
          " ",
        ),
        minLength: 1,
        maxLength,
      }),
    },
    // Exactly at the limit, in four-byte characters.
    { weight: 1, arbitrary: fc.constantFrom("🌵", "\u{10ffff}", "x", "é").map((c) => c.repeat(maxLength)) },
  );

/** A valid NewPlant as text, with optional hostile extra properties. */
export type PlantCase = { id: bigint; name: string; tag: string | undefined; body: Json };

const objectText = (entries: [string, Json][], spaced: boolean) =>
  spaced
    ? `{ ${entries.map(([k, v]) => `${JSON.stringify(k)} :\t${v.text}`).join(" ,\n ")} }`
    : `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v.text}`).join(",")}}`;

const objectValue = (entries: [string, Json][]) => {
  const value: Record<string, unknown> = {};
  for (const [k, v] of entries) Object.defineProperty(value, k, { value: v.value, enumerable: true, writable: true });
  return value;
};

/** Names of extra properties: prototype keys, look-alikes of the real ones, anything. */
export const extraKey = fc.oneof(
  fc.constantFrom(
    "__proto__",
    "constructor",
    "prototype",
    "toString",
    "hasOwnProperty",
    "valueOf",
    "ID",
    "Name",
    "TAG",
    "id ",
    " name",
    "nаme", // Cyrillic а
    "",
    "\u0000",
    "$where",
  ),
  fc.string({ maxLength: 10 }),
);

/** Any JSON value (shallow-ish): for extra properties and wrong types. */
export const anyJson: fc.Arbitrary<Json> = fc.letrec<{ json: Json }>((tie) => ({
  json: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom<Json>(
      { text: "null", value: null },
      { text: "true", value: true },
      { text: "false", value: false },
      { text: "1e999999999", value: 10n ** 999n },
      { text: "-1e-999999999", value: -0 },
      { text: `${"9".repeat(400)}`, value: 10n ** 400n },
      { text: "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]", value: [] },
    ),
    fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => ({ text: JSON.stringify(d), value: d })),
    fc.string().chain(jsonString),
    fc.array(tie("json"), { maxLength: 4 }).map((items) => ({
      text: `[${items.map((i) => i.text).join(",")}]`,
      value: items.map((i) => i.value),
    })),
    fc
      .uniqueArray(fc.tuple(extraKey, tie("json")), { maxLength: 4, selector: ([key]) => key })
      .map((entries) => ({ text: objectText(entries, false), value: objectValue(entries) })),
  ),
})).json;

const withoutFields = extraKey.filter((k) => k !== "id" && k !== "name" && k !== "tag");

/** Extra properties; their names never repeat each other nor id/name/tag (a duplicate key is a 400 of its own). */
export const extras = fc.uniqueArray(fc.tuple(withoutFields, anyJson), { maxLength: 3, selector: ([k]) => k });

/** A valid NewPlant: id over the whole int64 range in any integer notation, Unicode name and tag. */
export const validPlant: fc.Arbitrary<PlantCase> = fc
  .record({
    id: int64,
    name: unicodeText(NAME_MAX),
    tag: fc.option(unicodeText(TAG_MAX), { nil: undefined, freq: 3 }),
    extras,
    spaced: fc.boolean(),
    order: fc.nat(5),
  })
  .chain(({ id, name, tag, extras, spaced, order }) =>
    fc
      .tuple(integerText(id), jsonString(name), tag === undefined ? fc.constant(undefined) : jsonString(tag))
      .map(([idJson, nameJson, tagJson]) => {
        const fields: [string, Json][] = [
          ["id", idJson],
          ["name", nameJson],
        ];
        if (tagJson) fields.push(["tag", tagJson]);
        const entries = [...fields, ...extras];
        // Rotate so the known fields are not always first.
        const rotated = [...entries.slice(order % entries.length), ...entries.slice(0, order % entries.length)];
        return { id, name, tag, body: { text: objectText(rotated, spaced), value: objectValue(rotated) } };
      }),
  );

/* ---------- wrong values per field ---------- */

const outOfRange = fc.oneof(
  fc.bigInt({ min: INT64_MAX + 1n, max: 2n ** 70n }),
  fc.bigInt({ min: -(2n ** 70n), max: INT64_MIN - 1n }),
  fc.constantFrom(INT64_MAX + 1n, INT64_MIN - 1n, 2n ** 64n, -(2n ** 64n)),
);

/** Values the contract must refuse as an id, with what a correct parser reads from them. */
export const wrongId: fc.Arbitrary<Json> = fc.oneof(
  outOfRange.map((n) => ({ text: String(n), value: n })),
  outOfRange.map((n) => ({ text: `${n}.0`, value: n })),
  fc.constantFrom<Json>(
    { text: "1e400", value: 10n ** 400n },
    { text: "-1e19", value: -(10n ** 19n) },
    { text: "1E19", value: 10n ** 19n },
    { text: "1e-400", value: Number.NaN },
    { text: "9007199254740993.5", value: NOT_SAFE },
    { text: "9223372036854775807.5", value: NOT_SAFE },
    { text: "0.5", value: 0.5 },
    { text: "-1.25e1", value: -12.5 },
    { text: `1${"0".repeat(30)}`, value: 10n ** 30n },
  ),
  fc
    .double({ noNaN: true, noDefaultInfinity: true })
    .filter((d) => !Number.isInteger(d))
    .map((d) => ({ text: JSON.stringify(d), value: d })),
  int64.map((n) => String(n)).chain(jsonString), // "5"
  fc.constantFrom<Json>({ text: "true", value: true }, { text: "null", value: null }, { text: '""', value: "" }),
  anyJson.filter((j) => typeof j.value !== "number" && typeof j.value !== "bigint"),
);

/** Strings of exactly max+1 code points, lone surrogates, and non-strings. */
export const wrongText = (max: number): fc.Arbitrary<Json> =>
  fc.oneof(
    fc
      .constantFrom("🌵", "x", "\u0000")
      .map((c) => ({ text: JSON.stringify(c.repeat(max + 1)), value: c.repeat(max + 1) })),
    fc.string({ unit: "binary", minLength: max + 1, maxLength: max + 20 }).chain(jsonString),
    fc.constantFrom("\ud800", "a\udfffb", "\ude00\ud83d", `${"x".repeat(max - 1)}\ud800`).chain(jsonString),
    fc.constant<Json>({ text: '""', value: "" }),
    anyJson.filter((j) => typeof j.value !== "string"),
  );

type Field = { kind: "absent" } | { kind: "json"; json: Json };

const field = (valid: fc.Arbitrary<Json>, wrong: fc.Arbitrary<Json>) =>
  fc.oneof(
    { weight: 2, arbitrary: valid.map((json): Field => ({ kind: "json", json })) },
    { weight: 2, arbitrary: wrong.map((json): Field => ({ kind: "json", json })) },
    { weight: 1, arbitrary: fc.constant<Field>({ kind: "absent" }) },
  );

/**
 * A request body built field by field — each of id, name, tag valid, wrongly typed or valued, or
 * absent — plus extra properties, sometimes a duplicated key, sometimes not an object at all.
 * `value` is what the body means (undefined when it is not one JSON value, e.g. duplicate keys).
 */
export type StructuralBody =
  | { kind: "object"; text: string; value: Record<string, unknown>; duplicate: string | undefined }
  | { kind: "not-object"; text: string; value: unknown };

export const structuralBody: fc.Arbitrary<StructuralBody> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc
      .record({
        id: field(int64.chain(integerText), wrongId),
        name: field(unicodeText(NAME_MAX).chain(jsonString), wrongText(NAME_MAX)),
        tag: field(unicodeText(TAG_MAX).chain(jsonString), wrongText(TAG_MAX)),
        extras,
        duplicate: fc.option(fc.constantFrom("id", "name", "tag"), { freq: 6 }),
        // Never equal to the first value: equal duplicates have a property of their own.
        duplicateValue: fc
          .string()
          .map((text): Json => ({ text: JSON.stringify(`dup:${text}`), value: `dup:${text}` })),
        spaced: fc.boolean(),
      })
      .map(({ id, name, tag, extras, duplicate, duplicateValue, spaced }): StructuralBody => {
        const entries: [string, Json][] = [];
        for (const [key, f] of [
          ["id", id],
          ["name", name],
          ["tag", tag],
        ] as const) {
          if (f.kind === "json") entries.push([key, f.json]);
        }
        entries.push(...extras);
        const repeated = duplicate && entries.some(([key]) => key === duplicate) ? duplicate : undefined;
        const value = objectValue(entries);
        if (repeated) entries.push([repeated, duplicateValue]);
        return { kind: "object", text: objectText(entries, spaced), value, duplicate: repeated };
      }),
  },
  {
    weight: 1,
    arbitrary: anyJson
      .filter((j) => typeof j.value !== "object" || j.value === null || Array.isArray(j.value))
      .map((j): StructuralBody => ({ kind: "not-object", text: j.text, value: j.value })),
  },
);

/* ---------- raw bytes ---------- */

/** Byte sequences that break UTF-8 or JSON in interesting ways. */
const NASTY_BYTES = [
  [0xff],
  [0xfe],
  [0xc0, 0x80], // overlong NUL
  [0xc1, 0xbf],
  [0xe0, 0x80, 0xaf], // overlong
  [0xed, 0xa0, 0x80], // a UTF-16 surrogate encoded as UTF-8
  [0xed, 0xbf, 0xbf],
  [0xf0, 0x9f], // truncated four-byte sequence
  [0xf4, 0x90, 0x80, 0x80], // beyond U+10FFFF
  [0xef, 0xbb, 0xbf], // a BOM (valid at the start only, as a JSON whitespace never)
  [0xc2, 0xa0], // NBSP: whitespace for JavaScript, not for JSON
  [0xe2, 0x80, 0xa8], // U+2028
  [0x00],
  [0x1b],
  [0x0b],
  [0x0c],
  [0x7f],
  [0x22], // "
  [0x5c], // \
  [0x2c], // ,
  [0x7b], // {
  [0x7d], // }
].map((bytes) => Buffer.from(bytes));

type Mutation =
  | { op: "replace"; at: number; byte: number }
  | { op: "insert"; at: number; bytes: Buffer }
  | { op: "delete"; at: number; length: number }
  | { op: "truncate"; at: number }
  | { op: "repeat"; at: number; length: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant("replace" as const), at: fc.nat(), byte: fc.nat(255) }),
  fc.record({
    op: fc.constant("insert" as const),
    at: fc.nat(),
    bytes: fc.oneof(fc.constantFrom(...NASTY_BYTES), fc.uint8Array({ minLength: 1, maxLength: 8 }).map(Buffer.from)),
  }),
  fc.record({ op: fc.constant("delete" as const), at: fc.nat(), length: fc.integer({ min: 1, max: 8 }) }),
  fc.record({ op: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ op: fc.constant("repeat" as const), at: fc.nat(), length: fc.integer({ min: 1, max: 40 }) }),
);

export const applyMutation = (body: Buffer, m: Mutation): Buffer => {
  const at = body.length === 0 ? 0 : m.at % (body.length + 1);
  switch (m.op) {
    case "replace":
      if (body.length === 0) return body;
      return Buffer.concat([
        body.subarray(0, at % body.length),
        Buffer.from([m.byte]),
        body.subarray((at % body.length) + 1),
      ]);
    case "insert":
      return Buffer.concat([body.subarray(0, at), m.bytes, body.subarray(at)]);
    case "delete":
      return Buffer.concat([body.subarray(0, at), body.subarray(at + m.length)]);
    case "truncate":
      return body.subarray(0, at);
    case "repeat":
      return Buffer.concat([body.subarray(0, at + m.length), body.subarray(at)]);
  }
};

/** Where a body is padded to: at, just under or just over the 16 384-byte limit, or not at all. */
const padding = fc.oneof(
  { weight: 3, arbitrary: fc.constant<number | undefined>(undefined) },
  { weight: 1, arbitrary: fc.integer({ min: BODY_MAX_BYTES - 16, max: BODY_MAX_BYTES + 16 }) },
  { weight: 1, arbitrary: fc.integer({ min: BODY_MAX_BYTES + 17, max: 3 * BODY_MAX_BYTES }) },
);

/** Pads a JSON object body to exactly `size` bytes with a string property (or whitespace when too short). */
export function padTo(body: Buffer, size: number, where: "property" | "whitespace"): Buffer {
  const close = body.lastIndexOf(0x7d);
  if (where === "property" && close > 0) {
    const head = body.subarray(0, close);
    const fill = size - body.length - ',"pad":""'.length;
    if (fill >= 0) return Buffer.concat([head, Buffer.from(`,"pad":"${"p".repeat(fill)}"`), body.subarray(close)]);
  }
  return body.length >= size ? body : Buffer.concat([body, Buffer.alloc(size - body.length, 0x20)]);
}

export const mutatedBody = fc
  .record({
    plant: validPlant,
    bom: fc.boolean(),
    mutations: fc.array(mutation, { minLength: 0, maxLength: 4 }),
    pad: padding,
    padWhere: fc.constantFrom("property" as const, "whitespace" as const),
    nest: fc.option(fc.integer({ min: 1, max: 9000 }), { freq: 8 }),
  })
  .map(({ plant, bom, mutations, pad, padWhere, nest }) => {
    let text = plant.body.text;
    if (nest !== null) text = `${text.slice(0, -1)},"deep":${"[".repeat(nest)}${"]".repeat(nest)}}`;
    let body: Buffer = Buffer.from(text, "utf8");
    if (pad !== undefined) body = padTo(body, pad, padWhere);
    for (const m of mutations) body = applyMutation(body, m);
    if (bom) body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), body]);
    return { body, mutated: mutations.length > 0 || nest !== null };
  });

/* ---------- headers ---------- */

/** Header value characters Node's client will send: tab, visible ASCII, space, Latin-1. */
const headerChar = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.constantFrom("\t", "\u00a0", "\u00ff", "\u0080", "é") },
);
export const headerValue = fc.string({ unit: headerChar, maxLength: 60 });

/** Authorization header(s) to send; the oracle is `expectedAuth`. */
export type AuthCase = Record<string, string | string[]>;

const caseVariants = (text: string) => fc.mixedCase(fc.constant(text));

/** The right token in any scheme case and spacing (RFC 9110: the scheme is case-insensitive). */
export const goodAuthorization: fc.Arbitrary<AuthCase> = fc
  .tuple(caseVariants("Bearer"), fc.integer({ min: 1, max: 3 }), fc.integer({ min: 0, max: 2 }))
  .map(([scheme, before, after]) => ({ authorization: `${scheme}${" ".repeat(before)}${TOKEN}${" ".repeat(after)}` }));

/** Authorization headers: right ones, missing, blank, near misses, garbage, repeated. */
export const authorization: fc.Arbitrary<AuthCase> = fc.oneof(
  goodAuthorization,
  fc.constant<AuthCase>({}),
  fc.constantFrom("", " ", "  \t", "\u00a0").map((v): AuthCase => ({ authorization: v })),
  fc
    .constantFrom(
      `Bearer ${TOKEN.toUpperCase()}`,
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.slice(0, -1)}`,
      `Bearer\t${TOKEN}`,
      `Bearer${TOKEN}`,
      `Basic ${Buffer.from(`user:${TOKEN}`).toString("base64")}`,
      `Token ${TOKEN}`,
      `Bearer "${TOKEN}"`,
      `Bearer ${TOKEN} ${TOKEN}`,
      `Bearer ${TOKEN},Bearer ${TOKEN}`,
      "Bearer",
      "Bearer ",
      "Bearer ps_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
      `Bearer ${TOKEN}\u00e9`,
      ` Bearer ${TOKEN}`,
      `Bearer ${TOKEN}\t`,
      `Bearer ${TOKEN}====`,
    )
    .map((v): AuthCase => ({ authorization: v })),
  headerValue.map((v): AuthCase => ({ authorization: v })),
  headerValue.map((v): AuthCase => ({ authorization: `Bearer ${v}` })),
  // Repeated Authorization headers: ambiguous, refused whichever comes first.
  fc.constant<AuthCase>({ authorization: [`Bearer ${TOKEN}`, `Bearer ${TOKEN}`] }),
  fc.constant<AuthCase>({ authorization: [`Bearer ${TOKEN}`, "Bearer wrong-token-0000000000"] }),
  fc.constant<AuthCase>({ authorization: ["Bearer wrong-token-0000000000", `Bearer ${TOKEN}`] }),
);

/**
 * What docs/api.md promises for a header: "missing" (absent or blank: 401, realm only),
 * "ok" (Bearer + the token, scheme in any case), "ambiguous" (more than one header: 400), else
 * "invalid" (401, error="invalid_token").
 * HTTP strips spaces and tabs around a field value; a NBSP-only value may count as either.
 */
export function expectedAuth(headers: AuthCase): "ok" | "missing" | "invalid" | "missing-or-invalid" | "ambiguous" {
  const raw = headers.authorization;
  if (Array.isArray(raw) && raw.length > 1) return "ambiguous";
  const first = Array.isArray(raw) ? raw[0] : raw;
  if (first === undefined) return "missing";
  const value = first.replace(/^[ \t]+|[ \t]+$/g, "");
  if (value === "") return "missing";
  if (value.trim() === "") return "missing-or-invalid";
  const match = /^([A-Za-z]+) +(.*?) *$/.exec(value);
  return match?.[1]?.toLowerCase() === "bearer" && match[2] === TOKEN ? "ok" : "invalid";
}

export type ContentTypeCase = { value: string | undefined; expect: "json" | "other" | "either" };

/** Content-Type: JSON in any case with good or bad parameters, other media types, none. */
export const contentType: fc.Arbitrary<ContentTypeCase> = fc.oneof(
  fc
    .tuple(
      caseVariants("application/json"),
      fc.constantFrom("", "; charset=utf-8", ";charset=UTF-8", "; Charset=utf8", '; charset="utf-8"', "; foo=bar"),
    )
    .map(([type, params]): ContentTypeCase => ({ value: `${type}${params}`, expect: "json" })),
  fc
    .tuple(
      caseVariants("application/json"),
      fc.constantFrom("latin1", "ISO-8859-1", "utf-16", "UTF-16LE", "us-ascii", "utf-7", "utf-32"),
    )
    .map(([type, charset]): ContentTypeCase => ({ value: `${type}; charset=${charset}`, expect: "other" })),
  fc
    .constantFrom(
      "text/plain",
      "text/json",
      "application/jsonx",
      "application/json-patch+json",
      "application/problem+json",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      "application/octet-stream",
      "json",
      "application",
      "application/",
      "*/*",
      "",
    )
    .map((value): ContentTypeCase => ({ value, expect: "other" })),
  fc.constant<ContentTypeCase>({ value: undefined, expect: "other" }),
  headerValue.map((value): ContentTypeCase => ({ value, expect: "either" })),
  headerValue.map((value): ContentTypeCase => ({ value: `application/json;${value}`, expect: "either" })),
);

/** Headers that should change nothing: odd accepts, encodings, request ids, random names. */
export const otherHeaders = fc.dictionary(
  fc.oneof(
    fc.constantFrom(
      "accept",
      "accept-encoding",
      "accept-charset",
      "x-request-id",
      "origin",
      "sec-fetch-site",
      "cookie",
      "x-forwarded-for",
      "forwarded",
      "user-agent",
      "te",
      "expect-ct",
      "x-http-method-override",
      "range",
      "if-none-match",
    ),
    fc.stringMatching(/^x-[a-z0-9-]{1,12}$/),
  ),
  headerValue,
  { maxKeys: 4 },
);
