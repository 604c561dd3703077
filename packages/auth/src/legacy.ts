import type { Logger } from "@proctor/schema";
import type { Allowlist } from "./allowlist";
import { InvalidAddressError, MalformedHeaderError, MissingHeaderError, NotAllowedError } from "./errors";
import { HeaderReader, type HeadersInput } from "./headers";
import { decodeAddress } from "./ss58";

export const LEGACY_HOTKEY_HEADER = "X-Hotkey";

export interface InsecureLegacyHotkeyOptions {
  allowlist: Allowlist;
  /** Receives the insecurity warning; required so the opt-in is never silent. */
  logger: Logger;
  /** Must be literally `true`: the caller acknowledges that anyone can claim any allowlisted hotkey. */
  acknowledgeInsecure: true;
}

/**
 * The seed executor's scheme: trust an `X-Hotkey` header naming an allowlisted address. It proves
 * nothing (anyone who knows an allowlisted address can send it), so it exists only for old
 * clients, behind an explicit opt-in that logs a warning when created and on every accepted
 * request. Returns a checker that throws `MissingHeaderError`/`MalformedHeaderError` (401) or
 * `NotAllowedError` (403).
 */
export function createInsecureLegacyHotkeyAuth(options: InsecureLegacyHotkeyOptions): (headers: HeadersInput) => { hotkey: string } {
  if (options.acknowledgeInsecure !== true) {
    throw new TypeError("createInsecureLegacyHotkeyAuth needs acknowledgeInsecure: true; prefer Epistula v2 signed requests");
  }
  const { allowlist, logger } = options;
  logger.warn(`INSECURE: legacy ${LEGACY_HOTKEY_HEADER} authentication is enabled; any client can impersonate an allowlisted hotkey. Switch clients to Epistula v2 signed requests.`, {
    allowlisted: allowlist.size,
  });
  return (headers) => {
    const hotkey = new HeaderReader(headers).get(LEGACY_HOTKEY_HEADER);
    if (hotkey === undefined) throw new MissingHeaderError(LEGACY_HOTKEY_HEADER);
    let publicKey: Uint8Array;
    try {
      publicKey = decodeAddress(hotkey).publicKey;
    } catch (cause) {
      if (!(cause instanceof InvalidAddressError)) throw cause;
      throw new MalformedHeaderError(LEGACY_HOTKEY_HEADER, `an SS58 hotkey address (${cause.message})`, { cause });
    }
    if (!allowlist.hasPublicKey(publicKey)) throw new NotAllowedError(LEGACY_HOTKEY_HEADER, hotkey);
    logger.warn(`accepted an unauthenticated ${LEGACY_HOTKEY_HEADER} request (insecure legacy mode)`, { hotkey });
    return { hotkey };
  };
}
