// The authenticator lives in @proctor/auth; slots.ts and ui.ts still import it from here.
export { principalKey } from "@proctor/auth";
export type { RequestAuthenticator } from "@proctor/auth";
