import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import Dockerode from "dockerode";
import { ImageError } from "@proctor/sandbox";
import { daemonMessage, isConnectionError, statusCode } from "./docker-errors";

/**
 * Image settings given at start are wrong: `registry` (not HOST[:PORT][/prefix]), `unreachable`
 * (it does not answer the daemon), `credentials` (it wants credentials Docker lacks, or refused
 * them), `tls` (plain HTTP or an untrusted certificate where Docker requires TLS), `budget` (a disk
 * budget that is not a positive number). Apps exit 3 for unreachable, else 2.
 */
export class ImageSettingsError extends ImageError {
  override name = "ImageSettingsError";
  constructor(message: string, readonly kind: "registry" | "unreachable" | "credentials" | "tls" | "budget", options?: { cause?: unknown }) {
    super(message, null, options);
  }
}

/** Docker's registry credentials for one host, as `docker login` stores them. */
export interface RegistryAuth {
  username: string;
  password: string;
  serveraddress: string;
}

const CHECK_TIMEOUT_MS = 15_000;

/**
 * An image registry that task images are shared through: `HOST[:PORT][/prefix]`. A task image
 * `proctor-build/<hash>` is stored as `HOST[:PORT][/prefix]/proctor-build:<hash>`. Credentials are
 * Docker's own (`docker login HOST`, in `$DOCKER_CONFIG/config.json`, default ~/.docker).
 */
export class ImageRegistry {
  readonly host: string;
  readonly prefix: string;
  private authLoaded: Promise<RegistryAuth | null> | undefined;

  constructor(readonly spec: string, private readonly env: NodeJS.ProcessEnv = process.env) {
    const trimmed = spec.trim().replace(/\/+$/, "");
    if (/^[a-z]+:\/\//i.test(trimmed)) {
      throw new ImageSettingsError(`image registry "${spec}": give HOST:PORT[/prefix] without a scheme (e.g. 127.0.0.1:5000 or registry.example.com/proctor)`, "registry");
    }
    const [host = "", ...rest] = trimmed.split("/");
    if (!/^(\[[0-9a-f:]+\]|[a-z0-9]([a-z0-9.-]*[a-z0-9])?)(:\d{1,5})?$/i.test(host)) {
      throw new ImageSettingsError(`image registry "${spec}": "${host}" is not a HOST or HOST:PORT (e.g. 127.0.0.1:5000 or registry.example.com/proctor)`, "registry");
    }
    const prefix = rest.join("/");
    if (prefix !== "" && !/^[a-z0-9]+([._-][a-z0-9]+)*(\/[a-z0-9]+([._-][a-z0-9]+)*)*$/.test(prefix)) {
      throw new ImageSettingsError(`image registry "${spec}": the prefix "${prefix}" must be lowercase path components (letters, digits, . _ -)`, "registry");
    }
    this.host = host;
    this.prefix = prefix;
  }

  /** The registry's name for a local `proctor-build/<hash>` tag. */
  remoteRef(localTag: string): string {
    const [repository, hash] = localTag.split("/");
    return `${this.host}${this.prefix ? `/${this.prefix}` : ""}/${repository}:${hash}`;
  }

  /** Docker's stored credentials for this host (an `auths` entry of $DOCKER_CONFIG/config.json), or null. */
  auth(): Promise<RegistryAuth | null> {
    this.authLoaded ??= (async () => {
      const path = join(this.env.DOCKER_CONFIG || join(homedir(), ".docker"), "config.json");
      let config: { auths?: Record<string, { auth?: string; username?: string; password?: string }> };
      try {
        config = JSON.parse(await readFile(path, "utf8")) as typeof config;
      } catch {
        return null;
      }
      const entry = config.auths?.[this.host] ?? config.auths?.[`https://${this.host}`] ?? config.auths?.[`http://${this.host}`];
      if (!entry) return null;
      if (entry.username && entry.password) return { username: entry.username, password: entry.password, serveraddress: this.host };
      if (!entry.auth) return null;
      const decoded = Buffer.from(entry.auth, "base64").toString("utf8");
      const colon = decoded.indexOf(":");
      if (colon < 0) return null;
      return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1), serveraddress: this.host };
    })();
    return this.authLoaded;
  }

  /**
   * Asks the Docker daemon, which pulls and pushes, to look up a tag in the registry: it answers
   * there and takes Docker's credentials for it. The daemon resolves the name, chooses HTTPS or
   * plain HTTP (loopback, insecure-registries) and checks certificates as it will for every pull,
   * so a name that means something else to Proctor's process (a worker in a container) is judged
   * as the daemon sees it. Throws ImageSettingsError with one line saying what to do.
   */
  async check(docker: Dockerode = new Dockerode()): Promise<void> {
    const auth = await this.auth();
    const probe = this.remoteRef("proctor-build/registry-check");
    const fix = "start it, or fix --image-registry / PROCTOR_IMAGE_REGISTRY";
    let message: string;
    let status: number | undefined;
    try {
      await Promise.race([
        docker.getImage(probe).distribution(auth ? { authconfig: auth } : {}),
        new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out after ${CHECK_TIMEOUT_MS / 1000} s`)), CHECK_TIMEOUT_MS).unref()),
      ]);
      return; // the probe tag exists: it answers
    } catch (error) {
      if (isConnectionError(error)) throw new ImageSettingsError(`cannot check image registry ${this.host}: the Docker daemon does not answer (${daemonMessage(error)})`, "unreachable", { cause: error });
      message = daemonMessage(error).replace(/^\((HTTP code \d+)\) [a-z ]+ - /, "");
      status = statusCode(error);
    }
    const why = message.replace(/^(Get|Head) "[^"]*": /, "");
    if (status === 404 && /manifest unknown|name unknown|not found/i.test(message)) return; // it answered: no such tag
    if (/no basic auth credentials|authentication required|unauthorized|denied|401/i.test(message)) {
      if (!auth) throw new ImageSettingsError(`image registry ${this.host} wants credentials and Docker has none for it: docker login ${this.host} (stored in $DOCKER_CONFIG/config.json, default ~/.docker)`, "credentials");
      throw new ImageSettingsError(`image registry ${this.host} refused the credentials Docker has for user "${auth.username}": docker login ${this.host} again (DOCKER_CONFIG: ${this.env.DOCKER_CONFIG || "~/.docker"})`, "credentials");
    }
    if (/server gave HTTP response to HTTPS client/i.test(message)) {
      throw new ImageSettingsError(`image registry ${this.host} speaks plain HTTP, and Docker requires TLS for it: give it a certificate Docker trusts, or list it in the daemon's insecure-registries (docs/images.md)`, "tls");
    }
    if (/x509|certificate|tls:/i.test(message)) {
      throw new ImageSettingsError(`image registry ${this.host}: Docker does not trust its TLS certificate (${why}): install the CA on the Docker host (/etc/docker/certs.d/${this.host}/ca.crt)`, "tls");
    }
    if (/error parsing HTTP \d+ response/i.test(message)) {
      throw new ImageSettingsError(`image registry ${this.host} answers, but not as a Docker registry (distribution v2) does: ${fix}`, "unreachable");
    }
    throw new ImageSettingsError(`image registry ${this.host} does not answer (${why.split("\n")[0]}): ${fix}`, "unreachable");
  }
}

/** A pull failure that only means the registry lacks the image (then the image is built). */
export function isRegistryMiss(message: string): boolean {
  return /manifest unknown|not found|404/i.test(message) && !/blob unknown/i.test(message);
}

/**
 * The image settings of a Docker runtime from flags, else the environment (PROCTOR_IMAGE_REGISTRY,
 * PROCTOR_IMAGE_CACHE_GB): the registry checked once through the daemon (it answers and takes
 * Docker's credentials) and the disk budget in bytes ("default" when none is given). Throws
 * ImageSettingsError with one line for each problem.
 */
export async function imageSettings(
  given: { registry?: string | undefined; cacheGb?: string | number | undefined },
  env: NodeJS.ProcessEnv = process.env,
  docker: Dockerode = new Dockerode(),
): Promise<{ imageRegistry: ImageRegistry | null; imageCacheBytes: number | "default" }> {
  const spec = given.registry ?? (env.PROCTOR_IMAGE_REGISTRY || undefined);
  const flag = given.registry !== undefined ? "--image-registry" : "PROCTOR_IMAGE_REGISTRY";
  let registry: ImageRegistry | null = null;
  if (spec !== undefined) {
    try {
      registry = new ImageRegistry(spec, env);
    } catch (error) {
      throw error instanceof ImageSettingsError ? new ImageSettingsError(`${flag}: ${error.message}`, error.kind) : error;
    }
    await registry.check(docker);
  }
  const cacheGb = given.cacheGb ?? (env.PROCTOR_IMAGE_CACHE_GB || undefined);
  let imageCacheBytes: number | "default" = "default";
  if (cacheGb !== undefined) {
    const text = String(cacheGb);
    const n = Number(text);
    const name = given.cacheGb !== undefined ? "--image-cache-gb" : "PROCTOR_IMAGE_CACHE_GB";
    if (text.trim() === "" || !Number.isFinite(n) || n <= 0) throw new ImageSettingsError(`${name} must be a positive number of GB (e.g. 50 or 0.5), got "${text}"`, "budget");
    imageCacheBytes = Math.floor(n * 1024 ** 3);
  }
  return { imageRegistry: registry, imageCacheBytes };
}
