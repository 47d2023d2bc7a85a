/** Error responses every protected operation can give, as the OpenAPI document describes them. */
export const errors = {
  401: "Missing, invalid, expired or revoked bearer token",
  403: "The token lacks the scope this operation needs",
  429: "Too many requests for this token, or too many failed authentications from this address (see Retry-After)",
  500: "Unexpected server fault",
  503: "The store is temporarily unavailable, or has no room for changes (its disk full, Redis out of memory: the message says which); the request can be retried",
} as const;
