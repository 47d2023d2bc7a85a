import { z } from "zod";

/** The `Link` response header a paged listing at `path` documents. */
export const pageHeaders = (path: string) =>
  z.object({
    Link: z
      .string()
      .optional()
      .meta({
        description: `RFC 8288 link to the next page, \`<${path}?...&cursor=...>; rel="next"\`; absent on the last page`,
      }),
  });

/** The `Link` header of the page after this one: the listing's own query (set parameters only) and the cursor. */
export function nextPageLink(path: string, query: Record<string, string | number | undefined>, cursor: string) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value !== undefined) params.set(name, String(value));
  params.set("cursor", cursor);
  return `<${path}?${params}>; rel="next"`;
}
