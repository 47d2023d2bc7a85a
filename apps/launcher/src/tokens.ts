import { randomBytes } from "node:crypto";

/** A fresh random token: `ps_` + 32 random bytes, base64url. */
export function generateToken(): string {
  return `ps_${randomBytes(32).toString("base64url")}`;
}
