import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { WEBHOOK_SECRET_PREFIX } from "@plant-store/contracts";

/** A new signing secret: `whsec_` and base64 of 32 random bytes (Standard Webhooks). */
export const generateSecret = () => `${WEBHOOK_SECRET_PREFIX}${randomBytes(32).toString("base64")}`;

/** Thrown when a stored secret cannot be opened (sealed without the key, or with another key). */
export class SecretKeyError extends Error {
  override name = "SecretKeyError";
}

/**
 * Seals secrets for storage. With a key (WEBHOOK_SECRET_KEY) they are encrypted with AES-256-GCM,
 * so a copy of Redis alone does not reveal them; without one they are stored as they are (marked so).
 * Any text of at least 32 characters is a key: SHA-256 turns it into the cipher's 32 bytes.
 */
export function secretSealer(secretKey: string | undefined) {
  const key = secretKey === undefined ? undefined : createHash("sha256").update(secretKey).digest();
  return {
    seal(secret: string): string {
      if (!key) return `plain.${secret}`;
      const iv = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      const sealed = Buffer.concat([cipher.update(secret, "utf8"), cipher.final()]);
      return ["v1", iv, cipher.getAuthTag(), sealed]
        .map((part) => (typeof part === "string" ? part : part.toString("base64url")))
        .join(".");
    },
    open(stored: string): string {
      if (stored.startsWith("plain.")) return stored.slice("plain.".length);
      const [version, iv, tag, sealed] = stored.split(".");
      if (version !== "v1" || !iv || !tag || !sealed)
        throw new SecretKeyError("a stored webhook secret is not readable");
      if (!key)
        throw new SecretKeyError(
          "webhook secrets are encrypted: set WEBHOOK_SECRET_KEY to the key they were sealed with",
        );
      try {
        const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"));
        decipher.setAuthTag(Buffer.from(tag, "base64url"));
        return Buffer.concat([decipher.update(Buffer.from(sealed, "base64url")), decipher.final()]).toString("utf8");
      } catch {
        throw new SecretKeyError("a webhook secret does not open with WEBHOOK_SECRET_KEY (another key sealed it)");
      }
    },
  };
}

export type SecretSealer = ReturnType<typeof secretSealer>;
