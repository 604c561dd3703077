import { describe, expect, it } from "vitest";
import { catchError, recordingLogger } from "../test/helpers";
import { Allowlist } from "./allowlist";
import { MalformedHeaderError, MissingHeaderError, NotAllowedError } from "./errors";
import { Keypair } from "./keys";
import { createInsecureLegacyHotkeyAuth } from "./legacy";

const alice = Keypair.fromUri("//Alice").address;
const eve = Keypair.fromUri("//Eve").address;

describe("legacy X-Hotkey (insecure opt-in)", () => {
  it("refuses to be created without the explicit acknowledgement", () => {
    const { logger } = recordingLogger();
    expect(() => createInsecureLegacyHotkeyAuth({ allowlist: Allowlist.from([alice]), logger } as never)).toThrow(/acknowledgeInsecure/);
  });

  it("warns when enabled and on each accepted request, and checks the allowlist", () => {
    const { lines, logger } = recordingLogger();
    const check = createInsecureLegacyHotkeyAuth({ allowlist: Allowlist.from([alice]), logger, acknowledgeInsecure: true });
    expect(lines.filter((l) => l.level === "warn")).toHaveLength(1);
    expect(lines[0]?.message).toContain("INSECURE");
    expect(check({ "x-hotkey": alice })).toEqual({ hotkey: alice });
    expect(lines.filter((l) => l.level === "warn")).toHaveLength(2);
    const denied = catchError(() => check({ "X-Hotkey": eve })) as NotAllowedError;
    expect(denied).toBeInstanceOf(NotAllowedError);
    expect(denied.statusCode).toBe(403);
    expect(catchError(() => check({}))).toBeInstanceOf(MissingHeaderError);
    expect(catchError(() => check({ "x-hotkey": "nope" }))).toBeInstanceOf(MalformedHeaderError);
  });
});
