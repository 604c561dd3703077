import picomatch from "picomatch";
import { dockerfileInstructions } from "@proctor/schema";

/**
 * The context sources of a Dockerfile's COPY and ADD instructions (not `COPY --from=`, not URLs),
 * as written: the arguments before the destination, in shell or JSON form. Comment lines and
 * parser directives are skipped and continued lines joined, as Docker's classic builder reads them.
 */
function copySources(dockerfile: string): string[] {
  const instructions = dockerfileInstructions(dockerfile);
  const sources: string[] = [];
  for (const instruction of instructions) {
    const match = /^(COPY|ADD)\s+(.*)$/i.exec(instruction);
    if (!match?.[2]) continue;
    let rest = match[2].trim();
    const flags: string[] = [];
    while (rest.startsWith("--")) {
      const flag = /^(\S+)\s*/.exec(rest);
      flags.push(flag?.[1] ?? "");
      rest = rest.slice(flag?.[0].length ?? rest.length);
    }
    if (flags.some((flag) => flag.startsWith("--from"))) continue;
    let args: string[];
    if (rest.startsWith("[")) {
      try {
        const parsed: unknown = JSON.parse(rest);
        args = Array.isArray(parsed) ? parsed.map(String) : [rest];
      } catch {
        args = rest.split(/\s+/);
      }
    } else {
      args = rest.split(/\s+/);
    }
    for (const source of args.slice(0, -1)) if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(source) && !source.startsWith("git@")) sources.push(source);
  }
  return sources;
}

/**
 * Which of `names` (top-level entries of the build context) no COPY/ADD source of the Dockerfile
 * can reach: a source naming the context itself (`.`), using a variable, or not read (an
 * unreadable Dockerfile) reaches everything; a glob reaches the names it matches.
 */
export function unreferenced(dockerfile: string, names: readonly string[]): string[] {
  const kept = new Set<string>();
  for (const source of copySources(dockerfile)) {
    if (source.includes("$")) return [];
    const first = source.replace(/^(\.\/)+/, "").replace(/^\/+/, "").split("/", 1)[0] ?? "";
    if (first === "" || first === "." || first === "..") return [];
    if (/[*?[\\]/.test(first)) {
      const matches = picomatch(first, { dot: true });
      for (const name of names) if (matches(name)) kept.add(name);
    } else if (names.includes(first)) {
      kept.add(first);
    }
  }
  return names.filter((name) => !kept.has(name));
}
