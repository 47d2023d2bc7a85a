// How schemas appear in the OpenAPI document (zod-openapi overrides). Not exported from the package.

/**
 * Document override: the generated JSON Schema of a refined union/string says less than the
 * rule it checks, so state the rule instead (keeping any description).
 */
export const replaceWith =
  (schema: Record<string, unknown>) =>
  ({ jsonSchema }: { jsonSchema: Record<string, unknown> }) => {
    for (const key of Object.keys(jsonSchema)) if (key !== "description") delete jsonSchema[key];
    Object.assign(jsonSchema, schema);
  };

/** Objects stay open in the document: extra properties are ignored on input, never sent. */
export const openObject = ({ jsonSchema }: { jsonSchema: Record<string, unknown> }) => {
  delete jsonSchema.additionalProperties;
};
