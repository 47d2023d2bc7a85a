import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import type { FastifyInstance } from "fastify";

export const DOCS_PATH = "/docs";

/**
 * The API reference at /docs: Swagger UI (swagger-ui-dist, its static files only) on the served
 * /openapi.json, every asset from this service (it works without internet) and no inline script,
 * so the page's CSP allows scripts from this origin only (see security-headers.ts). No auth, like
 * the document; "Authorize" takes a bearer token for try-it-out.
 */
export async function docsPage(app: FastifyInstance) {
  const dist = dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));
  const asset = (file: string) => readFileSync(join(dist, file));
  const assets: Record<string, { type: string; body: Buffer | string }> = {
    "swagger-ui.css": { type: "text/css; charset=utf-8", body: asset("swagger-ui.css") },
    "swagger-ui-bundle.js": { type: "text/javascript; charset=utf-8", body: asset("swagger-ui-bundle.js") },
    "favicon-32x32.png": { type: "image/png", body: asset("favicon-32x32.png") },
    "init.js": {
      type: "text/javascript; charset=utf-8",
      body: `// Swagger UI shows a JSON response re-formatted through JSON.parse, which rounds integers beyond
// 2^53 (9007199254740993 showed as 9007199254740992). A body that would not survive that is shown
// as it came, in the same viewer (a plugin's wrapComponents: Swagger UI's extension point).
const survivesParsing = (text) => {
  try {
    return JSON.stringify(JSON.parse(text)) === text;
  } catch {
    return true; // not JSON: Swagger UI shows it raw itself
  }
};
const ExactJsonBodies = () => ({
  wrapComponents: {
    responseBody: (Original, system) => (props) => {
      const h = system.React.createElement;
      const { content, contentType } = props;
      if (typeof content !== "string" || !/json/i.test(contentType || "") || survivesParsing(content)) {
        return h(Original, props);
      }
      const HighlightCode = system.getComponent("HighlightCode", true);
      const options = { language: "json", downloadable: true, fileName: "response.json", canCopy: true };
      return h("div", null, h("h5", null, "Response body"), h(HighlightCode, options, content));
    },
  },
});
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#reference",
  deepLinking: true,
  displayOperationId: true,
  persistAuthorization: false,
  tryItOutEnabled: false,
  defaultModelRendering: "model",
  plugins: [ExactJsonBodies],
});
`,
    },
  };
  const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Plant Store API reference</title>
<link rel="icon" type="image/png" href="${DOCS_PATH}/favicon-32x32.png">
<link rel="stylesheet" href="${DOCS_PATH}/swagger-ui.css">
</head>
<body>
<div id="reference"></div>
<script src="${DOCS_PATH}/swagger-ui-bundle.js"></script>
<script src="${DOCS_PATH}/init.js"></script>
</body>
</html>
`;
  // The router hands the asterisk-form target ("*") to "/" too: that names no resource.
  app.get("/", (request, reply) =>
    request.url.startsWith("/") ? reply.redirect(DOCS_PATH, 302) : reply.callNotFound(),
  );
  app.get(DOCS_PATH, (_request, reply) => reply.type("text/html; charset=utf-8").send(page));
  // A route per asset: another method on one is a 405, an unknown name a 404, as everywhere.
  for (const [name, { type, body }] of Object.entries(assets)) {
    app.get(`${DOCS_PATH}/${name}`, (_request, reply) =>
      reply.type(type).header("cache-control", "public, max-age=3600").send(body),
    );
  }
}
