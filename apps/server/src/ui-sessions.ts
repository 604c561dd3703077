// The /ui browser sessions live in @proctor/auth; ui.ts still imports them from here.
export { UiSessions, sessionCookie, sessionIdFrom } from "@proctor/auth";
