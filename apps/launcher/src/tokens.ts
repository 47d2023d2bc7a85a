import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

/** A fresh random token: `ps_` + 32 random bytes, base64url. */
export function generateToken(): string {
  return `ps_${randomBytes(32).toString("base64url")}`;
}

/** A kept token file that does not hold a usable token (one sentence, for the launcher's log). */
export class KeptTokenError extends Error {}

/**
 * The token kept in `file`, generated and written there (mode 0600: it is a credential) the first
 * time, so that a token npm start printed still works after a restart. The api wants each token
 * at least 16 characters, without commas or spaces.
 */
export function keptToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    const token = generateToken();
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, `${token}\n`, { mode: 0o600, flag: "wx" });
    return token;
  }
  const token = text.trim();
  if (!/^[^\s,]{16,}$/.test(token)) {
    throw new KeptTokenError(
      `${file} does not hold a token (16 or more characters, no spaces or commas); delete it to generate a new one.`,
    );
  }
  chmodSync(file, 0o600); // a copy restored with looser permissions is narrowed again
  return token;
}
