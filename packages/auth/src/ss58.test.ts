import { decodeAddress as pjsDecode, encodeAddress as pjsEncode } from "@polkadot/util-crypto";
import bs58 from "bs58";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AddressBase58Error,
  AddressChecksumError,
  AddressLengthError,
  AddressPrefixError,
  InvalidAddressError,
} from "./errors";
import { decodeAddress, encodeAddress, isValidAddress } from "./ss58";
import { catchError } from "../test/helpers";

const ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY";
const ALICE_HEX = "d43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d";

describe("SS58", () => {
  it("round-trips the well-known //Alice address", () => {
    const decoded = decodeAddress(ALICE);
    expect(Buffer.from(decoded.publicKey).toString("hex")).toBe(ALICE_HEX);
    expect(decoded.prefix).toBe(42);
    expect(encodeAddress(decoded.publicKey)).toBe(ALICE);
  });

  it("agrees with @polkadot/util-crypto for random keys and simple/two-byte prefixes", () => {
    const prefix = fc.integer({ min: 0, max: 16383 }).filter((p) => p !== 46 && p !== 47);
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), prefix, (key, p) => {
        const ours = encodeAddress(key, p);
        expect(ours).toBe(pjsEncode(key, p));
        const back = decodeAddress(ours, { expectedPrefix: p });
        expect(back.prefix).toBe(p);
        expect(Buffer.from(back.publicKey).equals(Buffer.from(pjsDecode(ours)))).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it("names bad base58", () => {
    const error = catchError(() => decodeAddress("5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKut0I"));
    expect(error).toBeInstanceOf(AddressBase58Error);
    expect((error as InvalidAddressError).problem).toBe("base58");
    expect(catchError(() => decodeAddress(""))).toBeInstanceOf(AddressBase58Error);
  });

  it("names a bad checksum (one changed character)", () => {
    const typo = `${ALICE.slice(0, 10)}${ALICE[10] === "a" ? "b" : "a"}${ALICE.slice(11)}`;
    const error = catchError(() => decodeAddress(typo));
    expect(error).toBeInstanceOf(AddressChecksumError);
    expect((error as Error).message).toContain("checksum");
  });

  it("names a wrong length (33-byte account id with a valid checksum, too-long text)", () => {
    const payload = Uint8Array.of(42, ...new Uint8Array(33).fill(7));
    const long = bs58.encode(Uint8Array.of(...payload, 0, 0));
    expect(catchError(() => decodeAddress(long))).toBeInstanceOf(AddressLengthError);
    expect(catchError(() => decodeAddress("1".repeat(1000)))).toBeInstanceOf(AddressLengthError);
    expect(catchError(() => encodeAddress(new Uint8Array(31)))).toBeInstanceOf(AddressLengthError);
  });

  it("names a wrong, reserved or invalid prefix", () => {
    const polkadot = pjsEncode(decodeAddress(ALICE).publicKey, 0);
    const wrong = catchError(() => decodeAddress(polkadot, { expectedPrefix: 42 }));
    expect(wrong).toBeInstanceOf(AddressPrefixError);
    expect((wrong as AddressPrefixError).prefix).toBe(0);
    expect((wrong as Error).message).toContain("42 is expected");
    expect(catchError(() => encodeAddress(new Uint8Array(32), 46))).toBeInstanceOf(AddressPrefixError);
    expect(catchError(() => encodeAddress(new Uint8Array(32), 16384))).toBeInstanceOf(AddressPrefixError);
    expect(catchError(() => decodeAddress(bs58.encode(Uint8Array.of(200, ...new Uint8Array(35)))))).toBeInstanceOf(AddressPrefixError);
    expect(isValidAddress(polkadot)).toBe(true);
    expect(isValidAddress(polkadot, { expectedPrefix: 42 })).toBe(false);
  });

  it("never throws anything but InvalidAddressError on arbitrary text", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (s) => {
        try {
          decodeAddress(s);
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidAddressError);
        }
      }),
      { numRuns: 500 },
    );
  });
});

