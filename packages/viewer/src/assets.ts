import { readFile } from "node:fs/promises";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** assets/ beside src/ and dist/: the same path from source and from the build. */
const ASSETS = resolve(dirname(fileURLToPath(import.meta.url)), "..", "assets");
const TYPES: Record<string, string> = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml" };

/** Nothing leaves the viewer's origin: no CDN, no fonts, no analytics, no inline script. */
export const VIEWER_CSP = "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** A static file of the app, with the headers to send it under. */
export interface ViewerAsset {
  body: Buffer;
  headers: Record<string, string>;
}

/**
 * The app's file `name` (`""` is index.html), or null for anything that is not one of its
 * assets. The app uses relative URLs only (`app.js`, `api/runs`, `ws`), so a host can mount it
 * at `/` or under a prefix such as the server's `/ui/`.
 */
export async function readViewerAsset(name: string): Promise<ViewerAsset | null> {
  const file = name === "" ? "index.html" : name;
  if (!/^[a-z0-9-]+\.(?:html|js|css|svg)$/.test(file)) return null;
  const body = await readFile(join(ASSETS, file)).catch(() => null);
  if (!body) return null;
  return {
    body,
    headers: {
      "content-type": TYPES[extname(file)] ?? "application/octet-stream",
      "cache-control": "no-cache",
      "content-security-policy": VIEWER_CSP,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "x-frame-options": "DENY",
    },
  };
}
