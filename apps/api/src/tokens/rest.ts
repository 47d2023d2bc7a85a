import type { RestMetadata } from "../resource/module.js";
import { CREATED_AT, type OperationExamples } from "../resource/openapi.js";

const TOKEN_ID = "tok_3f9a1c0e7b2d";
const token = {
  id: TOKEN_ID,
  name: "inventory-sync",
  scopes: ["plants:read", "plants:write"],
  createdAt: CREATED_AT,
  expiresAt: "2027-11-24T09:30:00.000Z",
};
const admin = { 403: "This token lacks the admin scope" };

const examples: Record<string, OperationExamples> = {
  createToken: {
    request: { name: token.name, scopes: token.scopes, expiresInSeconds: 31_536_000 },
    response: { ...token, token: "ps_4kRzW1n0aT3m8YbQeVx7cL2pH9sJ6dGf5uN0oI1rK8w" },
    errors: { ...admin, 400: "scopes must name at least one scope" },
  },
  listTokens: {
    parameters: { limit: 100 },
    response: [token],
    errors: { ...admin, 400: "limit must be an integer from 1 to 1000" },
  },
  revokeToken: {
    parameters: { id: TOKEN_ID },
    errors: { ...admin, 400: "id must be at most 64 characters", 404: `There is no token with id ${TOKEN_ID}` },
  },
};

export const tokensRest: RestMetadata = {
  tags: [{ name: "admin", description: "Token administration (admin scope)", order: 1 }],
  order: 2,
  examples,
};
