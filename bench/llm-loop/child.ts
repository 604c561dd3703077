/**
 * The bench's scripted model server, in a process of its own (as a real endpoint is): every turn
 * before `--turns` asks for bash `true`, then it answers "done". Prints its base URL as the first
 * line on stdout and runs until stdin closes.
 */
import { parseArgs } from "node:util";
import { startScriptedModelServer } from "../../packages/llm/src/index";

const { values } = parseArgs({ options: { turns: { type: "string", default: "20" } } });
const turns = Number(values.turns);
const server = await startScriptedModelServer({
  keepRequests: false,
  handler: (r) => (r.turn < turns ? { toolCalls: [{ name: "bash", arguments: { command: "true" } }] } : { content: "done" }),
});
process.stdout.write(`${server.baseUrl}\n`);
process.stdin.resume();
process.stdin.on("close", () => void server.close().then(() => process.exit(0)));
