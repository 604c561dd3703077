import { describe, expect, test } from "vitest";
import type Dockerode from "dockerode";
import { applyContainerSettings, checkContainerSettings, parseContainerConfig } from "./container-config";

describe("container config", () => {
  test("parses MLE-bench's fields", () => {
    const config = parseContainerConfig(JSON.stringify({ mem_limit: "2g", shm_size: "512m", nano_cpus: 2e9, gpus: -1, runtime: "sysbox-runc", privileged: false }), "cc.json");
    expect(config).toEqual({ memoryMb: 2048, cpus: 2, settings: { shmSizeBytes: 512 * 1024 ** 2, gpus: -1, runtime: "sysbox-runc" } });
  });

  test("MLE-bench's own default.json as it ships: mem_limit null is no memory limit", () => {
    const text = '{\n    "mem_limit": null,\n    "shm_size": "4G",\n    "nano_cpus": 4e9,\n    "runtime": "runc"\n}\n';
    expect(parseContainerConfig(text, "default.json")).toEqual({ memoryMb: null, cpus: 4, settings: { shmSizeBytes: 4 * 1024 ** 3, runtime: "runc" } });
  });

  test("other docker-py containers.run arguments: applied, or refused by name with why; null is not set", () => {
    const config = parseContainerConfig(JSON.stringify({ cpu_quota: 150_000, cpuset_cpus: "0-1", cpu_shares: 512, mem_reservation: "1g", pids_limit: 4096, gpus: "all", network_mode: null, volumes: null }), "cc.json");
    expect(config).toEqual({ cpus: 1.5, pidsLimit: 4096, settings: { cpusetCpus: "0-1", cpuShares: 512, memoryReservationBytes: 1024 ** 3, gpus: -1 } });
    expect(() => parseContainerConfig('{"network_mode": "host"}', "cc.json")).toThrow(/^cc\.json: "network_mode" is not taken from the container config: a sandbox's network follows the task/);
    expect(() => parseContainerConfig('{"volumes": {"/": {"bind": "/host"}}}', "cc.json")).toThrow(/"volumes" is not taken from the container config: files reach the sandbox through the task/);
    expect(() => parseContainerConfig('{"cap_add": ["SYS_ADMIN"], "security_opt": []}', "cc.json")).toThrow(/"cap_add" would weaken the sandbox's isolation.*; "security_opt" would weaken/);
    expect(() => parseContainerConfig('{"device_requests": [{"count": -1}]}', "cc.json")).toThrow(/"device_requests" is not taken as is: ask for GPUs with "gpus"/);
    expect(() => parseContainerConfig('{"environment": {"A": "1"}}', "cc.json")).toThrow(/"environment" .*agent\.toml \[env\]/);
    expect(() => parseContainerConfig('{"memswap_limit": "8g"}', "cc.json")).toThrow(/"memswap_limit" is not supported: sandboxes get no swap/);
    expect(() => parseContainerConfig('{"nano_cpus": 2e9, "cpu_quota": 100000}', "cc.json")).toThrow(/give the CPUs once/);
    expect(() => parseContainerConfig('{"pids_limit": -1}', "cc.json")).toThrow(/"pids_limit" must be a whole number >= 1/);
  });

  test("gpus are checked against what the daemon offers", async () => {
    const daemon = (info: object) => ({ info: async () => info }) as unknown as Dockerode;
    const cdi = daemon({ DiscoveredDevices: [{ Source: "cdi", ID: "nvidia.com/gpu=0" }, { Source: "cdi", ID: "nvidia.com/gpu=1" }, { Source: "cdi", ID: "nvidia.com/gpu=all" }] });
    await expect(checkContainerSettings(cdi, { gpus: 2 })).resolves.toBeUndefined();
    await expect(checkContainerSettings(cdi, { gpus: -1 })).resolves.toBeUndefined();
    await expect(checkContainerSettings(cdi, { gpus: 4 })).rejects.toThrow(/4 GPU\(s\) requested .*but this Docker daemon offers 2 \(CDI devices nvidia\.com\/gpu=0, nvidia\.com\/gpu=1\): ask for at most 2/);
    // The NVIDIA runtime does not say how many GPUs it sees: any count goes to the daemon.
    await expect(checkContainerSettings(daemon({ Runtimes: { runc: {}, nvidia: {} } }), { gpus: 8 })).resolves.toBeUndefined();
    await expect(checkContainerSettings(daemon({ Runtimes: { runc: {} } }), { gpus: 1 })).rejects.toThrow(/1 GPU\(s\) requested .*no GPU support/);
  });

  test("bad input names the file and the field", () => {
    expect(() => parseContainerConfig("{", "cc.json")).toThrow(/cc\.json: not valid JSON/);
    expect(() => parseContainerConfig('{"memory": 1}', "cc.json")).toThrow(/cc\.json: unknown field\(s\) memory: not docker-py containers\.run arguments/);
    expect(() => parseContainerConfig('{"mem_limit": "lots"}', "cc.json")).toThrow(/cc\.json: "mem_limit" must be a size/);
    expect(() => parseContainerConfig('{"gpus": -2}', "cc.json")).toThrow(/"gpus" must be -1/);
    expect(() => parseContainerConfig('{"privileged": "yes"}', "cc.json")).toThrow(/"privileged" must be true or false/);
  });

  test("privileged needs I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True; GPUs become device requests; data mounts read-only", () => {
    expect(() => applyContainerSettings({}, [], { privileged: true }, {})).toThrow(/I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True/);
    expect(() => applyContainerSettings({}, [], { privileged: true }, { I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS: "true" })).toThrow(/I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS=True/);
    const host: Record<string, unknown> = {};
    applyContainerSettings(host, [{ hostPath: "/srv/data", sandboxPath: "/home/data", readOnly: true }], { privileged: true, gpus: 2, shmSizeBytes: 1024, runtime: "sysbox-runc", cpusetCpus: "0-1", cpuShares: 512, memoryReservationBytes: 4096 }, { I_ACCEPT_RUNNING_PRIVILEGED_CONTAINERS: "True" });
    expect(host).toMatchObject({
      CpusetCpus: "0-1",
      CpuShares: 512,
      MemoryReservation: 4096,
      Privileged: true,
      ShmSize: 1024,
      Runtime: "sysbox-runc",
      DeviceRequests: [{ Count: 2, Capabilities: [["gpu"]] }],
      Mounts: [{ Type: "bind", Source: "/srv/data", Target: "/home/data", ReadOnly: true }],
    });
  });
});
