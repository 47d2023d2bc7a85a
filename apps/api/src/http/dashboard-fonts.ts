// Bull Board's page asks Google Fonts for IBM Plex Sans and Mono. The dashboard's CSP allows
// nothing from elsewhere (and a service may have no internet), so the browser refused it with a
// console error on every page. The same fonts are served here from the @fontsource packages and the
// page's link is pointed at them.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { FastifyInstance } from "fastify";
import { apiError } from "../errors.js";

const require = createRequire(import.meta.url);

/** The weights Bull Board's link asks for. */
const FACES = [
  ["@fontsource/ibm-plex-sans", ["400", "500", "600"]],
  ["@fontsource/ibm-plex-mono", ["400", "500"]],
] as const;

/** The link in Bull Board's index.ejs, and what replaces it (relative to the page's <base>). */
const GOOGLE_FONTS_LINK = /<link href="https:\/\/fonts\.googleapis\.com\/[^"]*" rel="stylesheet">/;
const FONTS_STYLESHEET = "fonts/ibm-plex.css";
const LOCAL_FONTS_LINK = `<link href="${FONTS_STYLESHEET}" rel="stylesheet">`;

interface Fonts {
  css: string;
  /** File name → absolute path, only the files the stylesheet names. */
  files: Map<string, string>;
}

function loadFonts(): Fonts {
  let css = "";
  const files = new Map<string, string>();
  for (const [pkg, weights] of FACES) {
    const root = dirname(require.resolve(`${pkg}/package.json`));
    for (const weight of weights) {
      const sheet = readFileSync(join(root, `${weight}.css`), "utf8");
      css += sheet;
      for (const [, name] of sheet.matchAll(/url\(\.\/files\/([\w.-]+)\)/g)) {
        if (name) files.set(name, join(root, "files", name));
      }
    }
  }
  return { css, files };
}

/**
 * Registers `<prefix>/fonts/ibm-plex.css` and `<prefix>/fonts/files/:file` in `scope`, and points
 * the HTML pages rendered in it at them.
 */
export function registerDashboardFonts(scope: FastifyInstance, prefix: string): void {
  const fonts = loadFonts();
  scope.addHook("onSend", (_request, reply, payload, done) => {
    const html = typeof payload === "string" && String(reply.getHeader("content-type")).startsWith("text/html");
    done(null, html ? payload.replace(GOOGLE_FONTS_LINK, LOCAL_FONTS_LINK) : payload);
  });
  scope.get(`${prefix}/${FONTS_STYLESHEET}`, (_request, reply) => {
    reply.header("cache-control", "private, max-age=86400").type("text/css; charset=utf-8").send(fonts.css);
  });
  scope.get<{ Params: { file: string } }>(`${prefix}/fonts/files/:file`, (request, reply) => {
    const path = fonts.files.get(request.params.file);
    if (!path) {
      reply.code(404).send(apiError(404, "There is no such dashboard font file"));
      return;
    }
    const type = path.endsWith(".woff2") ? "font/woff2" : "font/woff";
    reply.header("cache-control", "private, max-age=86400").type(type).send(readFileSync(path));
  });
}
