"""Inverse text normalisation: spoken words in, written words out (numbers, money, dates and
times as digits), each written word mapped to the spoken words it came from (normalizer.py)."""
