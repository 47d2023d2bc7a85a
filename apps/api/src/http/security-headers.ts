import { DASHBOARD_PATH } from "./dashboard.js";
import { DOCS_PATH } from "./docs.js";

/**
 * Response headers for a JSON API and for the dashboard's pages. A fixed table rather than
 * @fastify/helmet: two header sets chosen by path is all this needs, and Bull Board's routes come
 * from its own plugin, where helmet's per-route options cannot reach.
 */
const common = {
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "strict-transport-security": "max-age=31536000; includeSubDomains",
};

export const API_HEADERS = {
  ...common,
  // JSON only: nothing may run, load or frame it; and nothing in between may keep a copy.
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
  "cache-control": "no-store",
};

const dashboard = {
  ...common,
  // Bull Board's own scripts and styles (it inlines some styles), nothing from elsewhere.
  "content-security-policy":
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
    "font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'self'",
};

/**
 * The API reference (Swagger UI): its scripts and styles from this origin (it sets some styles
 * inline), its icons as data: URIs, requests (the document, try-it-out) to this origin only.
 */
const docs = {
  ...common,
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
    "font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'self'",
};

/** The security headers of a response to `url`: the dashboard's and the reference's pages get their own CSP. */
export const securityHeadersFor = (url: string) =>
  url.startsWith(DASHBOARD_PATH)
    ? dashboard
    : url === DOCS_PATH || url.startsWith(`${DOCS_PATH}/`)
      ? docs
      : API_HEADERS;
