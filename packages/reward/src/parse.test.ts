import { describe, expect, it } from "vitest";
import { GarbledRewardError, MissingRewardError, noRewardMessage, RewardError, stderrReason } from "./errors";
import { isPass, parseReward } from "./parse";

function garbled(files: { json: string | null; txt: string | null }): GarbledRewardError {
  try {
    parseReward(files);
  } catch (error) {
    expect(error).toBeInstanceOf(GarbledRewardError);
    expect(error).toBeInstanceOf(RewardError);
    return error as GarbledRewardError;
  }
  throw new Error("parseReward accepted garbled input");
}

describe("parseReward from reward.txt", () => {
  it.each([
    ["1", 1],
    ["0", 0],
    ["0.25", 0.25],
    ["  1\n", 1],
    ["\ufeff0.5\r\n", 0.5],
    ["1e0", 1],
    ["-0.5", -0.5],
    [".5", 0.5],
  ])("reads %j as %d", (txt, reward) => {
    expect(parseReward({ json: null, txt })).toEqual({ reward, source: "txt" });
  });

  it.each([
    ["", "file is empty"],
    ["   \n", "file is empty"],
    ["NaN", "expected one number"],
    ["Infinity", "expected one number"],
    ["-Infinity", "expected one number"],
    ["pass", "expected one number"],
    ["0x1", "expected one number"],
    ["1 0", "expected one number"],
    ["1\n1", "expected one number"],
    ["true", "expected one number"],
    ["1e400", "not a finite number"],
  ])("rejects %j (%s) naming the file and content", (txt, reason) => {
    const error = garbled({ json: null, txt });
    expect(error.file).toBe("reward.txt");
    expect(error.content).toBe(txt);
    expect(error.reason).toContain(reason);
    expect(error.message).toContain("reward.txt");
    expect(error.message).toContain(JSON.stringify(txt));
  });

  it("trims long garbage to about 200 characters in the error", () => {
    const txt = "x".repeat(5000);
    const error = garbled({ json: null, txt });
    expect(error.content.length).toBeLessThanOrEqual(201);
    expect(error.message.length).toBeLessThan(400);
  });
});

describe("parseReward from reward.json", () => {
  it("reads the reward and returns the other keys as details", () => {
    const json = JSON.stringify({ reward: 0.75, passed: 3, total: 4, notes: { slow: true } });
    expect(parseReward({ json, txt: null })).toEqual({
      reward: 0.75,
      details: { passed: 3, total: 4, notes: { slow: true } },
      source: "json",
    });
  });

  it("has no details when reward is the only key", () => {
    expect(parseReward({ json: '{"reward": 1}', txt: null })).toEqual({ reward: 1, source: "json" });
  });

  it("accepts a bare number", () => {
    expect(parseReward({ json: " 0.5\n", txt: null })).toEqual({ reward: 0.5, source: "json" });
  });

  it("wins over reward.txt", () => {
    expect(parseReward({ json: '{"reward": 0}', txt: "1" }).reward).toBe(0);
    expect(parseReward({ json: '{"reward": 1}', txt: "0" }).reward).toBe(1);
  });

  it("is not silently replaced by reward.txt when garbled", () => {
    const error = garbled({ json: "{not json", txt: "1" });
    expect(error.file).toBe("reward.json");
    expect(error.reason).toBe("not valid JSON");
    expect(error.cause).toBeInstanceOf(SyntaxError);
  });

  it.each([
    ["", "file is empty"],
    ['{"score": 1}', 'no "reward" key'],
    ['{"reward": "1"}', "finite number"],
    ['{"reward": null}', "finite number"],
    ['{"reward": true}', "finite number"],
    ['{"reward": 1e999}', "finite number"],
    ["1e999", "not a finite number"],
    ['"1"', "expected {"],
    ["[1]", "expected {"],
    ["null", "expected {"],
    ['{"reward": NaN}', "not valid JSON"],
  ])("rejects %j (%s)", (json, reason) => {
    const error = garbled({ json, txt: null });
    expect(error.file).toBe("reward.json");
    expect(error.reason).toContain(reason);
  });

  it("uses the names the caller gives in messages", () => {
    const error = (() => {
      try {
        parseReward({ json: "oops", txt: null, jsonName: "trials/t1/verifier/reward.json" });
      } catch (e) {
        return e as GarbledRewardError;
      }
      throw new Error("no error");
    })();
    expect(error.message).toMatch(/^trials\/t1\/verifier\/reward\.json: not valid JSON, got "oops"/);
  });
});

describe("missing reward", () => {
  it("throws MissingRewardError when both files are absent, never a fallback", () => {
    expect(() => parseReward({ json: null, txt: null })).toThrow(MissingRewardError);
    expect(() => parseReward({ json: null, txt: null })).toThrow(/neither reward\.json nor reward\.txt exists/);
  });

  const missing = new MissingRewardError(["/logs/verifier/reward.json", "/logs/verifier/reward.txt"]);
  const rest = 'neither /logs/verifier/reward.json nor /logs/verifier/reward.txt exists; tests/test.sh must write "1", "0" or a number to reward.txt, or {"reward": <number>} to reward.json';

  it("the message names the line of the tests' stderr that says why: bash's syntax error, CRLF's \\r, else the last line", () => {
    expect(noRewardMessage(missing, 2, "/tests/test.sh: line 7: syntax error: unexpected end of file\n")).toBe(
      `the verifier wrote no reward (exit 2; test-stderr.txt: "/tests/test.sh: line 7: syntax error: unexpected end of file"): ${rest}`,
    );
    expect(stderrReason("/tests/test.sh: line 2: $'\\r': command not found\nmkdir: cannot create directory\n")).toBe("/tests/test.sh: line 2: $'\\r': command not found");
    expect(stderrReason("warning: x\n/tests/test.sh: line 9: syntax error near unexpected token `fi'\nmore\n")).toBe("/tests/test.sh: line 9: syntax error near unexpected token `fi'");
    expect(stderrReason("+ cd /app\npython3: can't open file '/tests/run.py': [Errno 2] No such file or directory\n\n")).toBe("python3: can't open file '/tests/run.py': [Errno 2] No such file or directory");
  });

  it("without stderr the message is as before; a long stderr line is cut at a word", () => {
    expect(noRewardMessage(missing, 0, "")).toBe(`the verifier wrote no reward: ${rest}`);
    expect(noRewardMessage(missing, 1, " \n")).toBe(`the verifier wrote no reward: ${rest} (the verifier exited with 1)`);
    const long = stderrReason(`error: ${"word ".repeat(100)}`) ?? "";
    expect(long.length).toBeLessThanOrEqual(200);
    expect(long).toMatch(/^error: (word )+word\.\.\.$/);
  });
});

describe("isPass", () => {
  it("passes at reward >= 1 only", () => {
    expect(isPass(1)).toBe(true);
    expect(isPass(1.5)).toBe(true);
    expect(isPass(0.999)).toBe(false);
    expect(isPass(0)).toBe(false);
    expect(isPass(-1)).toBe(false);
  });
});
