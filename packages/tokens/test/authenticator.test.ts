// The configured tokens (API_TOKENS, ADMIN_TOKEN) as the authenticator compares them: whole
// tokens only, whatever their lengths, each with its own scopes.
import { ALL_SCOPES } from "@plant-store/contracts";
import { describe, expect, it } from "vitest";
import { createAuthenticator } from "../src/index.js";

const SHORT = "short-token";
const LONG = "a-much-longer-configured-token-0123456789";
const ADMIN = "admin-token-abcdef";

const authenticator = createAuthenticator({ configTokens: [SHORT, LONG], adminToken: ADMIN });
const bearer = (token: string) => `Bearer ${token}`;

describe("configured tokens", () => {
  it("admits each configured token with its scopes, under an id that is not the token", async () => {
    const results = await Promise.all([SHORT, LONG, ADMIN].map((token) => authenticator.authenticate(bearer(token))));
    const principals = results.map((result) => (result.ok ? result.principal : undefined));
    expect(principals.map((principal) => principal?.scopes)).toEqual([ALL_SCOPES, ALL_SCOPES, ["admin"]]);
    const ids = principals.map((principal) => principal?.id ?? "");
    expect(new Set(ids).size).toBe(3);
    for (const id of ids) expect(id).toMatch(/^config-[0-9a-f]{12}$/);
  });

  it("refuses a configured token's prefixes, extensions and near misses", async () => {
    const nearMisses = [
      SHORT.slice(0, -1),
      `${SHORT}x`,
      LONG.slice(0, -1),
      `${LONG}x`, // longer than every configured token
      `${LONG}${LONG}`,
      `${SHORT.slice(0, -1)}X`,
      LONG.replace("a", "b"),
      SHORT.padEnd(LONG.length, "A"),
      "x",
    ];
    for (const token of nearMisses) {
      expect(await authenticator.authenticate(bearer(token)), token).toEqual({ ok: false, reason: "invalid" });
    }
  });

  it("still admits the configured tokens after refusals (no state left between requests)", async () => {
    await authenticator.authenticate(bearer(`${LONG}${LONG}`));
    await authenticator.authenticate(bearer(SHORT.slice(0, 3)));
    expect((await authenticator.authenticate(bearer(SHORT))).ok).toBe(true);
    expect((await authenticator.authenticate(bearer(LONG))).ok).toBe(true);
  });

  it("tells a missing and a malformed header apart", async () => {
    expect(await authenticator.authenticate(undefined)).toEqual({ ok: false, reason: "missing" });
    expect(await authenticator.authenticate("Basic abc")).toEqual({ ok: false, reason: "malformed" });
  });
});
