import { describe, expect, test } from "vitest";
import { pytestSection } from "./pytest-config";

describe("pytest's section of a root config file", () => {
  test("setup.cfg / tox.ini / pyproject.toml: only the pytest section counts, blank lines and trailing blanks do not", () => {
    const cfg = "[metadata]\nname = calc\n\n[tool:pytest]\nmarkers =\n    slow: slow tests\n\n[flake8]\nmax-line-length = 99\n";
    expect(pytestSection("setup.cfg", cfg)).toBe("[tool:pytest]\nmarkers =\n    slow: slow tests");
    // A real fix may edit the rest of the file.
    expect(pytestSection("setup.cfg", cfg.replace("name = calc", "name = calc2").replace("99", "120"))).toBe(pytestSection("setup.cfg", cfg));
    expect(pytestSection("setup.cfg", `${cfg.replace("slow tests\n", "slow tests   \n\n")}`)).toBe(pytestSection("setup.cfg", cfg));
    // addopts in the section, or a section added later in the file, is a different configuration.
    expect(pytestSection("setup.cfg", cfg.replace("[flake8]", "addopts = -p passall\n[flake8]"))).not.toBe(pytestSection("setup.cfg", cfg));
    expect(pytestSection("tox.ini", "[tox]\nenvlist = py3\n")).toBeNull();
    expect(pytestSection("tox.ini", "[tox]\nenvlist = py3\n[pytest]\naddopts = -x\n")).toBe("[pytest]\naddopts = -x");
    const toml = '[project]\nname = "calc"\n\n[tool.pytest.ini_options]\naddopts = "-ra"\n\n[tool.black]\nline-length = 99\n';
    expect(pytestSection("pyproject.toml", toml)).toBe(JSON.stringify({ ini_options: { addopts: "-ra" } }));
    expect(pytestSection("pyproject.toml", toml.replace("99", "120"))).toBe(pytestSection("pyproject.toml", toml));
    expect(pytestSection("pyproject.toml", '[project]\nname = "calc"\n')).toBeNull();
  });

  test("what pytest itself reads counts: TOML dotted keys, a lone CR as a line break", () => {
    // The same table written as a dotted key under [tool]: TOML (and pytest) read the same thing.
    const dotted = '[project]\nname = "calc"\n\n[tool]\npytest.ini_options.addopts = "-p calc.zz"\n';
    expect(pytestSection("pyproject.toml", dotted)).toBe(JSON.stringify({ ini_options: { addopts: "-p calc.zz" } }));
    // Python reads config files in text mode, where a lone CR ends a line.
    expect(pytestSection("setup.cfg", "[metadata]\nname = calc\r[tool:pytest]\raddopts = -p calc.zz\n")).toBe("[tool:pytest]\naddopts = -p calc.zz");
    expect(pytestSection("setup.cfg", "[metadata]\r\nname = calc\r\n")).toBeNull();
    // Form feeds too: iniconfig 2 splits lines as str.splitlines() does.
    expect(pytestSection("tox.ini", "[tox]\f[pytest]\faddopts = -p rtplug\n")).toBe("[pytest]\naddopts = -p rtplug");
  });

  test("pytest.ini is config as a whole; an absent file has none", () => {
    expect(pytestSection("pytest.ini", "[pytest]\n\naddopts = -q\n")).toBe("[pytest]\naddopts = -q");
    expect(pytestSection("pytest.ini", null)).toBeNull();
    expect(pytestSection("pytest.ini", "")).toBe("");
  });
});
