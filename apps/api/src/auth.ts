/** The token behind a Basic credential's password (browsers can send Basic, not Bearer). */
export function basicPassword(authorization: string | undefined): string | undefined {
  const encoded = /^Basic +([A-Za-z0-9+/]+=*) *$/i.exec(authorization ?? "")?.[1];
  if (!encoded) return undefined;
  const decoded = Buffer.from(encoded, "base64").toString("utf8");
  const separator = decoded.indexOf(":");
  return separator < 0 ? undefined : decoded.slice(separator + 1);
}
