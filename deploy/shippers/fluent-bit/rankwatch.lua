-- Record shaping for rankwatch (see kubernetes.conf and bare-metal.conf beside this file).

-- Kubernetes: a top-level "job" (the record key) from the training operator's label.
function job_from_labels(tag, timestamp, record)
    local k8s = record["kubernetes"]
    local labels = k8s and k8s["labels"]
    local job = labels and labels["training.kubeflow.org/job-name"]
    if job == nil then
        return -1, timestamp, record -- drop: not a training pod
    end
    record["job"] = job
    return 2, timestamp, record -- changed, timestamp kept
end

local hostname = os.getenv("NODE_NAME") or os.getenv("HOSTNAME") or "unknown"

-- Files: /var/log/training/<job>/rank-<N>.log (Slurm %t is the global rank) or
-- /var/log/training/<job>/attempt_<a>/<local_rank>/stdout.log (torchrun --log-dir).
function canonical_from_path(tag, timestamp, record)
    local path = record["source"] or ""
    local job, rank = string.match(path, "/training/([^/]+)/rank%-(%d+)%.log$")
    local out = { line = record["line"], host = hostname }
    if job ~= nil then
        out["job"] = job
        out["rank"] = tonumber(rank)
        out["source"] = "rank:" .. rank
    else
        local tjob, rest = string.match(path, "/training/([^/]+)/(attempt_%d+/%d+)/std%a+%.log$")
        if tjob == nil then
            return -1, timestamp, record
        end
        out["job"] = tjob
        out["source"] = hostname .. "/" .. rest
    end
    return 2, timestamp, out
end
