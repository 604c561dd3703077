import { describe, expect, it } from "vitest";
import { dockerfileInstructions } from "./dockerfile";

describe("dockerfileInstructions", () => {
  it("drops directives and comments, joins continued lines, honours the escape directive", () => {
    expect(dockerfileInstructions("# syntax=docker/dockerfile:1\nFROM a\n# note\nRUN one \\\n  # inside\n  two\n\nCOPY . /app\n")).toEqual(["FROM a", "RUN one two", "COPY . /app"]);
    expect(dockerfileInstructions("# escape=`\nFROM a\nRUN dir c:\\ `\n  && echo x\n")).toEqual(["FROM a", "RUN dir c:\\ && echo x"]);
    expect(dockerfileInstructions("FROM a\r\nCOPY x \\\r\n  /y\r\n")).toEqual(["FROM a", "COPY x /y"]);
  });
});
