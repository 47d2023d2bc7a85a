import { limits } from "@plant-store/contracts";
import type { FastifyInstance } from "fastify";
import { parse } from "lossless-json";

const JSON_NUMBER = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;
/** Stands for an integer too large for any int64, without computing it (`1e999999999`). */
const OUT_OF_RANGE = 2n ** 64n;

/**
 * The exact value of a JSON number: integers (also `1.0`, `1e3`) become a number when they are
 * safe integers and a bigint otherwise; fractions stay numbers. A fraction that a double would
 * round to an integer (9007199254740993.5) becomes NaN, so it can never pass as an integer.
 */
function exactJsonNumber(text: string): number | bigint {
  const match = JSON_NUMBER.exec(text);
  if (!match) return Number.NaN;
  const [, sign = "", whole = "", fraction = "", exponent = "0"] = match;
  const significant = `${whole}${fraction}`.replace(/^0+/, "");
  if (significant === "") return 0;
  const digits = significant.replace(/0+$/, "");
  const scale = Number(exponent) - fraction.length + (significant.length - digits.length);
  if (scale < 0) {
    const approximate = Number(text);
    return Number.isInteger(approximate) ? Number.NaN : approximate;
  }
  if (digits.length + scale > 20) return sign ? -OUT_OF_RANGE : OUT_OF_RANGE;
  const value = BigInt(`${sign}${digits}`) * 10n ** BigInt(scale);
  const asNumber = Number(value);
  return Number.isSafeInteger(asNumber) ? asNumber : value;
}

/** An error whose message is meant for the client. */
const clientError = (statusCode: number, message: string) => Object.assign(new Error(message), { statusCode });

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Parses a JSON request body exactly: UTF-8 only, numbers lossless, duplicate keys refused. */
function parseJsonBody(raw: Buffer, contentType: string | undefined): unknown {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? "")?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8") {
    throw clientError(415, `The request body must be UTF-8 JSON, not ${charset}`);
  }
  let text: string;
  try {
    text = utf8.decode(raw); // also drops a leading byte order mark
  } catch {
    throw clientError(400, "The request body is not valid UTF-8");
  }
  if (text.trim() === "") throw clientError(400, "The request body is empty: a JSON object is required");
  try {
    return parse(text, null, {
      parseNumber: exactJsonNumber,
      // Even with equal values: which one counts is ambiguous, so the body is refused.
      onDuplicateKey: ({ key }) => {
        throw new SyntaxError(`Duplicate key '${key}'`);
      },
    });
  } catch (error) {
    if (error instanceof RangeError) throw clientError(400, "The request body is nested too deeply");
    throw clientError(400, `The request body is not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * Makes `application/json` and, for PATCH, `application/merge-patch+json` (in any letter case, as
 * RFC 9110 wants) the scope's only body types (which method takes which: see rest.ts).
 */
export function useExactJsonBodies(scope: FastifyInstance) {
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser(
    ["application/json", "application/merge-patch+json"],
    { parseAs: "buffer", bodyLimit: limits.bodyMaxBytes },
    (request, body, done) => {
      try {
        done(null, parseJsonBody(body as Buffer, request.headers["content-type"]));
      } catch (error) {
        done(error as Error, undefined);
      }
    },
  );
}
