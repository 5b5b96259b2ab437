"""Ansible: the plan of each verb (playbook, hosts, vars), the one runner (the only ansible_runner
import), the live per-host table, and the results playbooks report."""
