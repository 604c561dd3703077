import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { catchError } from "../test/helpers";
import { InvalidTokenError, MalformedHeaderError, MissingHeaderError, TokenConfigError } from "./errors";
import { hashToken, loadTokens, TokenVerifier } from "./tokens";

const TOKEN_A = "tok_aaaaaaaaaaaaaaaaaaaaaaaa";
const TOKEN_B = "tok_bbbbbbbbbbbbbbbbbbbbbbbb";
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "proctor-auth-tokens-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("bearer tokens", () => {
  it("accepts configured tokens from $PROCTOR_TOKENS and refuses others with 401", () => {
    const tokens = loadTokens({ env: { PROCTOR_TOKENS: `${TOKEN_A},${TOKEN_B}` } });
    expect(tokens.verifyHeaders({ authorization: `Bearer ${TOKEN_B}` }).tokenId).toBe(hashToken(TOKEN_B).slice(7, 19));
    expect(tokens.verifyHeaders(new Headers({ Authorization: `bearer ${TOKEN_A}` })).tokenId).toHaveLength(12);
    const wrong = catchError(() => tokens.verifyHeaders({ authorization: `Bearer ${TOKEN_A}x` })) as InvalidTokenError;
    expect(wrong).toBeInstanceOf(InvalidTokenError);
    expect(wrong.statusCode).toBe(401);
    expect(wrong.header).toBe("Authorization");
    expect(catchError(() => tokens.verifyHeaders({}))).toBeInstanceOf(MissingHeaderError);
    expect(catchError(() => tokens.verifyHeaders({ authorization: `Basic ${TOKEN_A}` }))).toBeInstanceOf(MalformedHeaderError);
  });

  it("reads a file of hashed tokens, so the file does not hold the secrets", () => {
    const file = join(dir, "tokens");
    writeFileSync(file, `# ci runner\n${hashToken(TOKEN_A)}\n\n${TOKEN_B}\n`);
    const tokens = loadTokens({ env: { PROCTOR_TOKENS_FILE: file } });
    expect(tokens.size).toBe(2);
    expect(tokens.verifyToken(TOKEN_A).tokenId).toBe(hashToken(TOKEN_A).slice(7, 19));
    expect(tokens.verifyToken(TOKEN_B).tokenId).toBe(hashToken(TOKEN_B).slice(7, 19));
    expect(catchError(() => tokens.verifyToken(hashToken(TOKEN_A)))).toBeInstanceOf(InvalidTokenError);
  });

  it("refuses weak or malformed configuration without echoing the token", () => {
    const short = catchError(() => TokenVerifier.from([TOKEN_A, "short"], { source: "$PROCTOR_TOKENS" })) as TokenConfigError;
    expect(short).toBeInstanceOf(TokenConfigError);
    expect(short.message).toContain("entry 2");
    expect(short.message).not.toContain("short\"");
    expect(catchError(() => TokenVerifier.from(["sha256:1234"]))).toBeInstanceOf(TokenConfigError);
    expect(catchError(() => loadTokens({ env: { PROCTOR_TOKENS: "" } }))).toBeInstanceOf(TokenConfigError);
    expect(catchError(() => loadTokens({ env: {} }))).toBeInstanceOf(TokenConfigError);
  });
});
