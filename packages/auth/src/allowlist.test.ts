import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { catchError } from "../test/helpers";
import { Allowlist, loadAllowlist, parseAllowlist } from "./allowlist";
import { AllowlistError } from "./errors";
import { Keypair } from "./keys";
import { encodeAddress } from "./ss58";

const alice = Keypair.fromUri("//Alice").address;
const bob = Keypair.fromUri("//Bob").address;
const typo = `${alice.slice(0, -1)}${alice.endsWith("Y") ? "Z" : "Y"}`;
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "proctor-auth-allow-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("allowlist", () => {
  it("parses PROCTOR_HOTKEYS (comma-separated, spaces tolerated)", () => {
    const list = loadAllowlist({ env: { PROCTOR_HOTKEYS: ` ${alice}, ${bob} ,` } });
    expect(list.size).toBe(2);
    expect(list.has(alice)).toBe(true);
    expect(list.has(Keypair.fromUri("//Eve").address)).toBe(false);
  });

  it("matches by key, so the same key under another network prefix is the same entry", () => {
    const list = Allowlist.from([alice]);
    expect(list.has(encodeAddress(Keypair.fromUri("//Alice").publicKey, 0))).toBe(true);
    expect(list.has("garbage")).toBe(false);
  });

  it("reads a file with one hotkey per line and # comments, naming the bad line", () => {
    const file = join(dir, "hotkeys.txt");
    writeFileSync(file, `# validators\n${alice}  # alice\n\n${bob}\n`);
    expect(loadAllowlist({ env: { PROCTOR_HOTKEYS_FILE: file } }).addresses).toEqual([alice, bob]);
    writeFileSync(file, `# validators\n${alice}\n${typo}\n`);
    const error = catchError(() => loadAllowlist({ file })) as AllowlistError;
    expect(error).toBeInstanceOf(AllowlistError);
    expect(error.entry).toBe(3);
    expect(error.message).toContain(file);
    expect(error.message).toContain("line 3 is not a valid hotkey");
    expect(error.message).toContain("checksum");
  });

  it("names the entry in the env list and enforces the expected network", () => {
    const error = catchError(() => parseAllowlist(`${alice},${typo}`, { source: "$PROCTOR_HOTKEYS" })) as AllowlistError;
    expect(error.entry).toBe(2);
    expect(error.message).toMatch(/^\$PROCTOR_HOTKEYS: entry 2/);
    const polkadot = encodeAddress(Keypair.fromUri("//Alice").publicKey, 0);
    expect(catchError(() => parseAllowlist(polkadot, { ss58Prefix: 42 }))).toBeInstanceOf(AllowlistError);
  });

  it("refuses an empty or missing allowlist instead of allowing nobody silently", () => {
    expect(catchError(() => parseAllowlist(" , "))).toBeInstanceOf(AllowlistError);
    expect((catchError(() => loadAllowlist({ env: {} })) as Error).message).toContain("PROCTOR_HOTKEYS");
  });
});
