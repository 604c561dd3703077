import { packageBuild } from "../../tsup.config.base";

// testing/swe-calc: the SWE-bench fixture other packages' tests import as @proctor/engine/testing.
export default packageBuild(["src/index.ts", "src/testing/swe-calc.ts"]);
