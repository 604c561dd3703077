import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { describe as describeValue, displayPath, parseSizeMb } from "./fields";

describe("fields", () => {
  test.each([
    ["2G", 2048],
    ["512M", 512],
    ["512m", 512],
    ["1.5G", 1536],
    ["10GB", 10240],
    ["1T", 1048576],
    ["1024K", 1],
  ])("parseSizeMb(%s) = %d", (text, mb) => {
    expect(parseSizeMb(text)).toBe(mb);
  });

  test.each(["", "2", "lots", "2X", "-1G", "0G"])("parseSizeMb(%j) is null", (text) => {
    expect(parseSizeMb(text)).toBeNull();
  });

  test("paths inside the working directory are shown relative, others absolute", () => {
    expect(displayPath(join(process.cwd(), "examples/x/task.toml"))).toBe("examples/x/task.toml");
    expect(displayPath("/somewhere/else/task.toml")).toBe("/somewhere/else/task.toml");
  });

  test("values are quoted the way a user wrote them", () => {
    expect(describeValue("abc")).toBe('"abc"');
    expect(describeValue(-5)).toBe("-5");
    expect(describeValue(undefined)).toBe("nothing");
    expect(describeValue("x".repeat(200))).toHaveLength(80);
  });
});
