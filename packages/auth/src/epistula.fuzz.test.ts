import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Allowlist } from "./allowlist";
import { RequestAuthError } from "./errors";
import { EPISTULA_HEADERS, sha256Hex, signRequest, verifyRequest } from "./epistula";
import { Keypair } from "./keys";
import { ReplayCache } from "./replay-cache";

const NOW = 1_750_000_000_000;
const key = Keypair.fromUri("//Alice");
const allowlist = Allowlist.from([key.address]);
const names = Object.values(EPISTULA_HEADERS);

/** Header names in any case, plus unrelated ones. */
const headerName = fc.oneof(
  fc.constantFrom(...names).chain((n) => fc.constantFrom(n, n.toLowerCase(), n.toUpperCase())),
  fc.string({ minLength: 1, maxLength: 20 }),
);
/** Values: plausible pieces of real headers, random text, arrays, and non-strings a careless caller might pass. */
const headerValue = fc.oneof(
  fc.string({ maxLength: 200 }),
  fc.constantFrom("2", String(NOW), key.address, `0x${"ab".repeat(64)}`, "3fa85f64-5717-4562-b3fc-2c963f66afa6", "", ","),
  fc.array(fc.string({ maxLength: 40 }), { maxLength: 3 }),
  fc.constantFrom<unknown>(null, 42, {}, ["2", "2"]),
);

/** Random headers never carry a valid signature: each must be refused, and only with a typed 401/403. */
function expectRefusedWithTypedError(run: () => unknown): void {
  let error: unknown;
  try {
    run();
  } catch (caught) {
    error = caught;
  }
  if (error === undefined) throw new Error("verifyRequest accepted random headers");
  if (!(error instanceof RequestAuthError)) throw error;
  expect([401, 403]).toContain(error.statusCode);
  if (error.header !== null) expect(error.message).toContain(error.header);
}

describe("verifyRequest fuzzing", () => {
  it("random headers and bodies are always refused, only ever with a RequestAuthError", () => {
    fc.assert(
      fc.property(fc.dictionary(headerName, headerValue, { maxKeys: 10 }), fc.uint8Array({ maxLength: 256 }), (headers, body) => {
        expectRefusedWithTypedError(() =>
          verifyRequest({ headers: headers as Record<string, string>, body, now: NOW, allowlist, maxSkewMs: 30_000, replayCache: new ReplayCache() }),
        );
      }),
      { numRuns: 1500 },
    );
  });

  it("a valid request with one header mutated never passes and never throws untyped", () => {
    const body = new TextEncoder().encode("fuzz body");
    fc.assert(
      fc.property(fc.constantFrom(...names), fc.string({ maxLength: 140 }), fc.boolean(), (name, value, asHeaders) => {
        const signed = signRequest({ keypair: key, body, now: NOW, uuid: "3fa85f64-5717-4562-b3fc-2c963f66afa6" });
        fc.pre(signed[name] !== value && !(name === EPISTULA_HEADERS.signedFor && value === ""));
        const mutated = { ...signed, [name]: value };
        let input: Record<string, string> | Headers = mutated;
        if (asHeaders) {
          // fetch Headers refuses some characters itself; that is the HTTP stack's job, not ours.
          try {
            input = new Headers(mutated);
          } catch {
            return;
          }
          if (input.get(name) === signed[name]) return; // Headers trims whitespace back to the original
          // ...or to nothing: an empty Epistula-Signed-For is no Signed-For (excluded above as well).
          if (name === EPISTULA_HEADERS.signedFor && input.get(name) === "") return;
        }
        expect(() =>
          verifyRequest({ headers: input, body: { sha256Hex: sha256Hex(body) }, now: NOW, allowlist, maxSkewMs: 30_000, replayCache: new ReplayCache() }),
        ).toThrow(RequestAuthError);
      }),
      // A whitespace-only Signed-For that Headers trims to nothing (a soak run's counterexample).
      { numRuns: 300, examples: [[EPISTULA_HEADERS.signedFor, " ", true]] },
    );
  });
});
