import { GarbledRewardError, MissingRewardError } from "./errors";

/** The contents of the verifier's reward files; null when the file does not exist. */
export interface RewardFiles {
  /** Contents of reward.json, or null when absent. */
  json: string | null;
  /** Contents of reward.txt, or null when absent. */
  txt: string | null;
  /** Names used in error messages (default "reward.json" / "reward.txt"); pass full paths if you have them. */
  jsonName?: string;
  txtName?: string;
}

export interface ParsedReward {
  reward: number;
  /** Every key of reward.json other than "reward"; absent for reward.txt and a bare-number reward.json. */
  details?: Record<string, unknown>;
  /** Which file the reward came from. */
  source: "json" | "txt";
}

const MAX_SHOWN = 200;
/** A plain decimal number: no hex, no "Infinity", no empty string (which Number() reads as 0). */
const NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

function shown(content: string): string {
  return content.length > MAX_SHOWN ? `${content.slice(0, MAX_SHOWN)}…` : content;
}

function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function parseJson(text: string, file: string): ParsedReward {
  const trimmed = stripBom(text).trim();
  if (trimmed === "") throw new GarbledRewardError(file, text, "file is empty");
  let value: unknown;
  try {
    value = JSON.parse(trimmed);
  } catch (error) {
    throw new GarbledRewardError(file, shown(text), "not valid JSON", { cause: error });
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new GarbledRewardError(file, shown(text), "reward is not a finite number");
    return { reward: value, source: "json" };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new GarbledRewardError(file, shown(text), 'expected {"reward": <number>, ...} or a bare number');
  }
  const { reward, ...details } = value as Record<string, unknown>;
  if (reward === undefined) throw new GarbledRewardError(file, shown(text), 'the object has no "reward" key');
  if (typeof reward !== "number" || !Number.isFinite(reward)) {
    throw new GarbledRewardError(file, shown(text), '"reward" must be a finite number');
  }
  return Object.keys(details).length > 0 ? { reward, details, source: "json" } : { reward, source: "json" };
}

function parseTxt(text: string, file: string): ParsedReward {
  const trimmed = stripBom(text).trim();
  if (trimmed === "") throw new GarbledRewardError(file, text, "file is empty");
  if (!NUMBER.test(trimmed)) throw new GarbledRewardError(file, shown(text), "expected one number");
  const reward = Number(trimmed);
  if (!Number.isFinite(reward)) throw new GarbledRewardError(file, shown(text), "reward is not a finite number");
  return { reward, source: "txt" };
}

/**
 * Reads the verifier's reward. reward.json wins over reward.txt: when reward.json exists it
 * must be valid (a garbled reward.json is an error even if reward.txt is fine), so a verifier
 * is never scored from a file it did not mean. Throws MissingRewardError when neither file
 * exists and GarbledRewardError when the chosen file holds no finite number.
 */
export function parseReward(files: RewardFiles): ParsedReward {
  const jsonName = files.jsonName ?? "reward.json";
  const txtName = files.txtName ?? "reward.txt";
  if (files.json !== null) return parseJson(files.json, jsonName);
  if (files.txt !== null) return parseTxt(files.txt, txtName);
  throw new MissingRewardError([jsonName, txtName]);
}

/** Binary pass: reward >= 1. */
export function isPass(reward: number): boolean {
  return reward >= 1;
}
