export {
  AuthError,
  InvalidAddressError,
  AddressBase58Error,
  AddressChecksumError,
  AddressLengthError,
  AddressPrefixError,
  RequestAuthError,
  MissingHeaderError,
  DuplicateHeaderError,
  UnsupportedVersionError,
  MalformedHeaderError,
  TimestampOutOfWindowError,
  WrongRecipientError,
  ReplayedRequestError,
  BadSignatureError,
  InvalidTokenError,
  NotAllowedError,
  ReplayCacheFullError,
  ReplayCacheUnavailableError,
  ContentDigestError,
  AuthConfigError,
  AllowlistError,
  KeyLoadError,
  TokenConfigError,
} from "./errors";
export type { AddressProblem, RequestAuthCode } from "./errors";
export { decodeAddress, encodeAddress, isValidAddress, SUBSTRATE_SS58_PREFIX, MAX_SS58_PREFIX } from "./ss58";
export type { DecodedAddress, AddressOptions } from "./ss58";
export { defaultSr25519, scureSr25519, loadSchnorrkelWasm, sr25519Ready, Sr25519EngineError, verifyMessage, wrapBytes, isWrapped } from "./sr25519";
export type { Sr25519Verifier, MessageWrapping, VerifyMessageOptions } from "./sr25519";
export { Keypair, loadKeypair, DEV_PHRASE, HOTKEY_URI_ENV, HOTKEY_FILE_ENV } from "./keys";
export type { LoadKeypairOptions } from "./keys";
export { HeaderReader } from "./headers";
export type { HeadersInput, HeaderValue } from "./headers";
export { ReplayCache } from "./replay-cache";
export type { ReplayStore, ReplayCacheOptions } from "./replay-cache";
export { FileReplayCache } from "./replay-file";
export type { FileReplayCacheOptions, ReplayFsyncPolicy } from "./replay-file";
export { CONTENT_DIGEST_HEADER, contentDigestHeader, parseContentDigest } from "./content-digest";
export { Allowlist, parseAllowlist, loadAllowlist, HOTKEYS_ENV, HOTKEYS_FILE_ENV } from "./allowlist";
export type { AllowlistOptions, LoadAllowlistOptions } from "./allowlist";
export {
  signRequest,
  checkHeaders,
  verifySignature,
  verifyRequest,
  sha256Hex,
  epistulaMessage,
  EPISTULA_HEADERS,
  DEFAULT_MAX_SKEW_MS,
  DEFAULT_MAX_BODY_MS,
} from "./epistula";
export type {
  BodyInput,
  SignRequestOptions,
  CheckHeadersOptions,
  CheckedHeaders,
  VerifySignatureOptions,
  VerifyRequestOptions,
} from "./epistula";
export { TokenVerifier, loadTokens, hashToken, TOKENS_ENV, TOKENS_FILE_ENV, MIN_TOKEN_LENGTH } from "./tokens";
export type { TokenIdentity, LoadTokensOptions } from "./tokens";
export { createInsecureLegacyHotkeyAuth, LEGACY_HOTKEY_HEADER } from "./legacy";
export type { InsecureLegacyHotkeyOptions } from "./legacy";
export { RequestAuthenticator, principalKey, AUTH_MODES, ADMIN_HOTKEYS_ENV } from "./request-auth";
export type { AuthMode, RequestAuthConfig, PendingAuth } from "./request-auth";
export { UiSessions, sessionCookie, sessionIdFrom, UI_COOKIE, LOGIN_TOKEN_TTL_MS, SESSION_TTL_MS } from "./ui-sessions";
