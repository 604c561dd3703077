/**
 * A Dockerfile's instructions as Docker's classic builder reads them: parser directives at the top
 * (`# escape=` sets the continuation character, default `\`) and comment lines dropped,
 * continuation lines joined, blank lines skipped. Each instruction is one trimmed line.
 */
export function dockerfileInstructions(text: string): string[] {
  const lines = text.split(/\r?\n/);
  let escape = "\\";
  let start = 0;
  for (; start < lines.length; start++) {
    const directive = /^\s*#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$/.exec(lines[start] ?? "");
    if (!directive) break;
    if (directive[1]?.toLowerCase() === "escape" && (directive[2] === "`" || directive[2] === "\\")) escape = directive[2];
  }
  const instructions: string[] = [];
  let current: string | null = null;
  for (const raw of lines.slice(start)) {
    const line = raw.replace(/\s+$/, "");
    if (/^\s*#/.test(line)) continue; // a comment, also inside a continued instruction
    if (current === null && line.trim() === "") continue;
    const continued = line.endsWith(escape);
    const body = (continued ? line.slice(0, -1) : line).trim();
    current = current === null ? body : `${current} ${body}`;
    if (!continued) {
      instructions.push(current);
      current = null;
    }
  }
  if (current !== null && current.trim() !== "") instructions.push(current);
  return instructions;
}
