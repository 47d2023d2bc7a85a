import { ApiError } from "@plant-store/contracts";
import { generateOpenApiDocument } from "trpc-to-openapi";
import { globalRegistry, type ZodType } from "zod";
import { createSchema } from "zod-openapi";
import { statusMessages } from "../errors.js";
import type { ComposedApi, ResourceModule } from "../resource/module.js";
import {
  errorMessages,
  headersOf,
  type Json,
  NOT_MODIFIED,
  type OperationExamples,
  ref,
  responseHeaders,
} from "../resource/openapi.js";
import type { ApiRouter, Meta } from "../trpc.js";
import { isBodylessAction } from "./routes.js";

type Operations = Record<string, Json>;
type Paths = Record<string, Operations>;
type Procedure = { _def: { meta?: Meta; inputs: ZodType[] } };

const component = (schema: Parameters<typeof createSchema>[0], io: "input" | "output"): Json =>
  createSchema(schema, { io }).components ?? {};

/** The modules in the document's order: their paths, extra paths, webhooks and schemas follow it. */
const inDocumentOrder = (resources: readonly ResourceModule[]) =>
  [...resources].sort((a, b) => a.rest.order - b.rest.order);

type Generated = Json & { paths: Paths; components: Json };

/**
 * The document as the specification describes it. trpc-to-openapi's output differs in ways the
 * notes list (inlined bodies, trpc-style error schemas, per-operation security, `parameters: []`),
 * so this rewrites those parts from the contracts' schemas, and adds what each resource module's
 * REST metadata says: its tags, plain routes, examples and webhooks.
 */
export function buildOpenApiDocument({ router, resources, info }: ComposedApi): Json {
  const generated = generateOpenApiDocument(router, {
    ...info,
    baseUrl: "/",
    license: { name: "MIT", identifier: "MIT" },
    securitySchemes: { bearerAuth: { type: "http", scheme: "bearer" } },
  }) as unknown as Generated;
  // Named schemas of the responses, as generated; the trpc-style error schemas are replaced by Error.
  const schemas: Json = Object.fromEntries(
    Object.entries((generated.components.schemas ?? {}) as Json).filter(([name]) => !name.startsWith("error.")),
  );
  for (const procedure of proceduresOf(router)) rewriteProcedureOperation(procedure, generated.paths, schemas);
  addPlainOperations(generated.paths, resources, schemas);
  const paths = sortPaths(generated.paths, resources);
  const examples = examplesOf(resources);
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) finishOperation(operation, examples);
  }
  return assembleDocument(generated, paths, schemas, resources);
}

const proceduresOf = (router: ApiRouter) => Object.values(router._def.procedures) as unknown as Procedure[];

/** A procedure's operation as the document has it: its scope, named body, own error texts and success status. */
function rewriteProcedureOperation({ _def }: Procedure, paths: Paths, schemas: Json) {
  const { openapi, successStatus, requestBody, scope } = _def.meta ?? {};
  const operation = openapi && paths[openapi.path]?.[openapi.method.toLowerCase()];
  if (!operation) return;
  // The scope the operation needs, as a role of the bearer scheme (OpenAPI 3.1 allows them).
  operation.security = [{ bearerAuth: scope ? [scope] : [] }];
  // The generator inlines request bodies: refer to the named schema instead (the input's, or the
  // one the operation names: a PUT's body is the resource without its id), in its media type.
  const body = operation.requestBody as { content?: Record<string, { schema: unknown }> } | undefined;
  const input = requestBody?.schema ?? _def.inputs[0];
  const name = input && globalRegistry.get(input)?.id;
  if (body?.content?.["application/json"] && input && name) {
    body.content = { [requestBody?.mediaType ?? "application/json"]: { schema: ref(name) } };
    Object.assign(schemas, component(input, "input"));
  }
  // Each error response described by its own operation: the generator shares one response
  // object per status across operations, so the first operation's texts showed everywhere.
  const described = (openapi as { errorResponses?: Record<number, string> }).errorResponses ?? {};
  const responses = operation.responses as Operations;
  for (const [status, response] of Object.entries(responses)) {
    if (Number(status) < 400) continue;
    responses[status] = { ...response, description: described[Number(status)] ?? statusMessages[Number(status)] };
  }
  // An action on the path alone (rotate-secret, replay) takes no body.
  if (isBodylessAction(openapi.method, openapi.path, _def.inputs[0])) delete operation.requestBody;
  // Another success status than 200: token issue 201; deletes 204, no body.
  if (successStatus) {
    const { content, ...success } = responses["200"] ?? {};
    delete responses["200"];
    operation.responses = { [successStatus]: successStatus === 204 ? success : { ...success, content }, ...responses };
  }
}

/**
 * The plain routes' operations (an upload that streams its body), described by their modules and
 * put before their path's procedures; below, they are treated as every other operation.
 */
function addPlainOperations(paths: Paths, resources: readonly ResourceModule[], schemas: Json) {
  for (const resource of resources) {
    for (const { path, method, operation, schemas: outputs } of resource.rest.plainOperations ?? []) {
      paths[path] = { [method]: operation(), ...paths[path] };
      for (const schema of outputs) Object.assign(schemas, component(schema, "output"));
    }
  }
}

/** The paths grouped by the module that serves them, in the modules' document order (else the router's). */
function sortPaths(paths: Paths, resources: readonly ResourceModule[]): Paths {
  const orderOf = new Map<string, number>();
  for (const { router, rest } of resources) {
    for (const { _def } of proceduresOf(router)) {
      if (_def.meta?.openapi) orderOf.set(_def.meta.openapi.path, rest.order);
    }
    for (const { path } of rest.plainOperations ?? []) orderOf.set(path, rest.order);
  }
  const rank = (path: string) => orderOf.get(path) ?? Number.MAX_SAFE_INTEGER;
  return Object.fromEntries(Object.entries(paths).sort(([a], [b]) => rank(a) - rank(b)));
}

/** Every module's operation examples, by operation id. */
const examplesOf = (resources: readonly ResourceModule[]): Record<string, OperationExamples> =>
  Object.assign({}, ...resources.map((resource) => resource.rest.examples));

/** The tags of every module, in their document order. */
const tagsOf = (resources: readonly ResourceModule[]) =>
  resources
    .flatMap((resource) => resource.rest.tags)
    .sort((a, b) => a.order - b.order)
    .map(({ name, description }) => ({ name, description }));

/** The last touches every operation gets: a conditional read's 304, error bodies, examples, headers. */
function finishOperation(operation: Json, examples: Record<string, OperationExamples>) {
  // A conditional read's 304: no body, the current ETag.
  const parameters = (operation.parameters ?? []) as { in: string; name: string }[];
  if (parameters.some((p) => p.in === "header" && p.name === "If-None-Match")) {
    const { 200: ok, ...rest } = operation.responses as Operations;
    operation.responses = {
      200: ok,
      304: {
        description: NOT_MODIFIED,
        headers: (ok as { headers?: Json } | undefined)?.headers,
      },
      ...rest,
    };
  }
  if (Array.isArray(operation.parameters) && operation.parameters.length === 0) delete operation.parameters;
  const responses = operation.responses as Operations;
  for (const [status, response] of Object.entries(responses)) {
    if (Number(status) < 400) continue;
    response.description ??= statusMessages[Number(status)];
    response.content = { "application/json": { schema: ref("Error") } };
  }
  addExamples(operation, examples[operation.operationId as string] ?? {});
  for (const [status, response] of Object.entries(responses)) {
    response.headers = { ...(response.headers as Json | undefined), ...headersOf(Number(status)) };
  }
}

/** An operation's examples: its body, each parameter, its success body and each error's message. */
function addExamples(operation: Json, examples: OperationExamples) {
  for (const parameter of (operation.parameters ?? []) as Json[]) {
    if (examples.parameters?.[parameter.name as string] !== undefined) {
      parameter.example = examples.parameters[parameter.name as string];
    }
  }
  const body = operation.requestBody as { content: Record<string, Json> } | undefined;
  for (const media of Object.values(body?.content ?? {})) {
    if (examples.request !== undefined) media.example = examples.request;
  }
  for (const [status, response] of Object.entries(operation.responses as Record<string, Json>)) {
    const media = (response.content as Record<string, Json> | undefined)?.["application/json"];
    if (!media) continue;
    const code = Number(status);
    if (code >= 400) media.example = { error: code, message: examples.errors?.[code] ?? errorMessages[code] };
    else if (examples.response !== undefined) media.example = examples.response;
  }
}

/** The document's parts in its order; the modules' extra paths, webhooks and their schemas after the rest. */
function assembleDocument(generated: Generated, paths: Paths, schemas: Json, resources: readonly ResourceModule[]) {
  const ordered = inDocumentOrder(resources);
  const parts = (kind: "extraPaths" | "webhooks", part: "entries" | "schemas") =>
    Object.assign({}, ...ordered.map((resource) => resource.rest[kind]?.[part] ?? {})) as Json;
  return {
    openapi: generated.openapi,
    info: generated.info,
    servers: generated.servers,
    security: [{ bearerAuth: [] }],
    tags: tagsOf(resources),
    paths: { ...paths, ...parts("extraPaths", "entries") },
    webhooks: parts("webhooks", "entries"),
    components: {
      schemas: {
        ...schemas,
        ...component(ApiError, "output"),
        ...parts("webhooks", "schemas"),
        ...parts("extraPaths", "schemas"),
      },
      headers: responseHeaders,
      securitySchemes: (generated.components as { securitySchemes: Json }).securitySchemes,
    },
  };
}
