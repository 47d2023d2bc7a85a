/** The token behind a Basic credential's password (browsers can send Basic, not Bearer). */
export function basicPassword(authorization: string | undefined): string | undefined {
  const encoded = /^Basic +([A-Za-z0-9+/]+=*) *$/i.exec(authorization ?? "")?.[1];
  if (!encoded) return undefined;
  const decoded = Buffer.from(encoded, "base64").toString("utf8");
  const separator = decoded.indexOf(":");
  return separator < 0 ? undefined : decoded.slice(separator + 1);
}

/**
 * Whether a request carries more than one Authorization field. Node keeps the first and drops the
 * rest silently, so which credential counts would be a guess: the guard refuses such a request.
 */
export function repeatsAuthorization(rawHeaders: readonly string[]): boolean {
  let seen = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    if (name.length !== 13 || name.toLowerCase() !== "authorization") continue;
    if (seen) return true;
    seen = true;
  }
  return false;
}
