// Publishes the router's type for clients into @plant-store/api-contract (app-router.d.ts), after the
// api's build: clients depend on that package, never on the api's build output. It is made from the
// declaration the build emitted (dist/router.d.ts), which spells out every input, output and error
// shape; the only references to server code are the procedures' context (which holds the store,
// Redis connections, the token store…) and meta (trpc-to-openapi's route options). A client sees
// neither, so both become `object`, and a client needs none of the server's packages: only
// @trpc/server's types. Any other import in that declaration fails the build instead of leaking.
import { readFileSync, writeFileSync } from "node:fs";
import ts from "typescript";

const declaration = new URL("../dist/router.d.ts", import.meta.url);
const contract = new URL("../../../packages/api-contract/app-router.d.ts", import.meta.url);

/** What each server-side type referenced by the declaration becomes for clients. */
const SERVER_TYPES = { "./trpc.js": new Set(["Context", "Meta"]) };
// @trpc/server's own types (a subscription's output names its tracked envelope from the second).
const KEPT_MODULES = new Set(["@trpc/server", "@trpc/server/unstable-core-do-not-import"]);

const source = ts.createSourceFile("router.d.ts", readFileSync(declaration, "utf8"), ts.ScriptTarget.Latest);
const statement = source.statements.find(
  (node) => ts.isVariableStatement(node) && node.declarationList.declarations[0]?.name.getText(source) === "appRouter",
);
const routerType = statement?.declarationList.declarations[0]?.type;
if (!routerType) throw new Error(`${declaration.pathname} declares no typed appRouter`);

const problems = [];
const eraseServerTypes = (context) => {
  const visit = (node) => {
    if (ts.isImportTypeNode(node)) {
      const module = node.argument.literal.text;
      const name = node.qualifier?.getText(source);
      if (SERVER_TYPES[module]?.has(name)) return ts.factory.createKeywordTypeNode(ts.SyntaxKind.ObjectKeyword);
      if (!KEPT_MODULES.has(module)) problems.push(`import("${module}").${name}`);
    }
    return ts.visitEachChild(node, visit, context);
  };
  return (node) => ts.visitNode(node, visit);
};
const [clientType] = ts.transform(routerType, [eraseServerTypes]).transformed;
if (problems.length > 0) {
  throw new Error(`the router's declaration references server code a client cannot install: ${problems.join(", ")}`);
}

const printer = ts.createPrinter({ newLine: ts.NewLineKind.LineFeed });
writeFileSync(
  contract,
  [
    "// Written by the api's build (apps/api/scripts/publish-contract.mjs) from its router's declaration: do not edit.",
    "/** The Plant Store's tRPC router as clients see it: every procedure's input, output and error shape. */",
    `export type AppRouter = ${printer.printNode(ts.EmitHint.Unspecified, clientType, source)};`,
    "",
  ].join("\n"),
);
